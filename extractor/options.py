"""The options of one extraction, defined once.

:class:`ExtractOptions` holds the field list, the defaults and the checks. Everything that carries
options is it, or is typed from it: the ``options`` of ``POST /extract/{task}`` and its batch, the
``extractor`` extension of ``/v1/chat/completions``, ``extractor batch``/``eval`` and their Ray
runner, and the Python API's keyword arguments (:class:`OptionArgs`, checked into an
:class:`ExtractOptions` by :func:`checked`). :class:`Options` adds the sampling the OpenAI front
passes through (``top_p``, ``seed``, ``stop``); it is what the pipeline takes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Annotated, Any, TypedDict

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from extractor.config import MAX_ATTEMPTS_LIMIT
from extractor.errors import InputError
from extractor.grounding import GroundingPolicy

MAX_TOKENS_LIMIT = 8192  # as a task's x-extractor.max_tokens and /v1's max_tokens


def whole_number(value: Any) -> Any:
    """JSON Schema's integer is a number with no fractional part: 3.0 is one, as the OpenAPI document says."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


AttemptCount = Annotated[int, Field(ge=1, le=MAX_ATTEMPTS_LIMIT), BeforeValidator(whole_number)]
TokenCount = Annotated[int, Field(ge=1, le=MAX_TOKENS_LIMIT), BeforeValidator(whole_number)]


class ExtractOptions(BaseModel):
    """Per-request overrides of the task's settings; None (the default) takes the task's, then the global one.

    Strict, as every request body: a value of the wrong JSON type is refused naming the field, never coerced.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    temperature: float | None = Field(default=None, ge=0, le=2, description="sampling temperature")
    max_attempts: AttemptCount | None = Field(
        default=None, description="attempts at most: the first, then re-asks that carry the errors"
    )
    max_tokens: TokenCount | None = Field(
        default=None, description="tokens an answer may take (clamped to what the model window leaves)"
    )
    grounding: GroundingPolicy | None = Field(
        default=None, description="a value not found in the text: strict (re-ask, then remove), flag, off"
    )
    chunk: bool | None = Field(
        default=None, description="split a text longer than the window (None: the task's setting)"
    )
    grounded_decoding: bool | None = Field(
        default=None, description="decode grounded string fields as spans of the text (None: the task's setting)"
    )
    reference_date: dt.date | None = Field(
        default=None,
        strict=False,  # JSON has no date type: YYYY-MM-DD strings are read as dates
        description="what a relative date in a typed value ('next Friday', '下周五') is read against, YYYY-MM-DD "
        "(None: today's date, and the result says so in a note)",
    )

    @field_validator("reference_date", mode="before")
    @classmethod
    def _iso_date(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, str | dt.date):
            raise ValueError("write the reference date as a string, YYYY-MM-DD")
        return value


class Options(ExtractOptions):
    """:class:`ExtractOptions` and the sampling the OpenAI front passes to the engine as asked."""

    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()

    @classmethod
    def of(cls, options: ExtractOptions, **sampling: Any) -> Options:
        """``options`` (as a request sent them) with ``sampling`` (``top_p``, ``seed``, ``stop``)."""
        return cls.model_validate({**dict(options), **sampling})


class OptionArgs(TypedDict, total=False):
    """:class:`ExtractOptions` as keyword arguments, ``extract(task, text, **options)`` (tests keep the two equal)."""

    temperature: float | None
    max_attempts: int | None
    max_tokens: int | None
    grounding: GroundingPolicy | None
    chunk: bool | None
    grounded_decoding: bool | None
    reference_date: dt.date | None


def checked(values: Mapping[str, Any]) -> Options:
    """``values`` (the Python API's keywords) as options; a bad one is an :class:`InputError` naming it."""
    try:
        return Options.model_validate(dict(values))
    except ValidationError as invalid:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'options'}: {e['msg']}" for e in invalid.errors(include_url=False)
        )
        raise InputError(problems) from None
