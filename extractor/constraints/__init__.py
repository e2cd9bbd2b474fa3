"""What decoding is held to, beyond the task's JSON Schema: grounded fields as substrings of the text.

- :mod:`extractor.constraints.substring`: the task schema as an llguidance Lark grammar whose
  grounded string fields can only be substrings of the text (any length of text, a few ms);
- :mod:`extractor.constraints.grounded_decoding`: which fields are grounded, and the older per-request enum
  of spans, kept for what the grammar cannot express;
- :mod:`extractor.constraints.patterns`: ``pattern`` and ``format: regex`` on RE2 (linear time, no ReDoS).
"""
