"""Typed values that keep their evidence: the model copies the words, the service types them.

A field the schema types as a date, a time, a duration or a number (``"format": "date" |
"date-time" | "time" | "duration"``, ``"type": "number" | "integer"``) is grounded like any
string: decoding holds the model to words of the text (the *evidence*), and the service turns the
evidence into the schema's type with maintained libraries (:mod:`extractor.values.dates`,
:mod:`extractor.values.numbers`, :mod:`extractor.values.durations`). ``"x-grounded": false``
keeps the old meaning: the model writes the value itself, with no evidence.

Pure: no I/O, no engine. The layer sits on the schema and the text, below the catalog.
"""

from extractor.values.context import AmbiguousEvidenceError, Context, EvidenceError
from extractor.values.fields import ValueField, check_settings, evidence_schema, value_fields
from extractor.values.normalize import Applied, Typed, apply, normalize

__all__ = [
    "AmbiguousEvidenceError",
    "Applied",
    "Context",
    "EvidenceError",
    "Typed",
    "ValueField",
    "apply",
    "check_settings",
    "evidence_schema",
    "normalize",
    "value_fields",
]
