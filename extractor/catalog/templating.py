"""The prompt-template sandbox: Jinja's immutable sandbox, bounded in time, output and memory.

Jinja's sandbox already refuses attribute tricks (``''.__class__.__mro__``, ``|attr('__globals__')``)
and caps ``range`` at 100,000 items, but not work or size: ``'x' * 10**9`` allocates a gigabyte,
nested loops run for hours, a doubling macro grows without end. Here:

- **time**: a render stops after ``MAX_RENDER_S`` (a trace hook on the template's own frames, which
  every loop iteration and macro call passes through, and a check in every filter, call and operator);
- **output**: a render stops past ``MAX_OUTPUT_CHARS``;
- **memory**: every operator, call and filter that can make a value bigger than its inputs is
  checked *before* it runs: its result may not exceed ``MAX_VALUE_CHARS``;
- **state**: no ``namespace`` and no mutating methods (``list.append``), so nothing accumulates
  across loop iterations; recursion ends at Python's recursion limit.

Past any bound the render raises :class:`TemplateLimitError` (a Jinja ``SecurityError``): at load,
the task is left out naming the template; at request time it is that request's error alone.
"""

from __future__ import annotations

import functools
import json
import math
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sized
from contextlib import contextmanager
from types import FrameType
from typing import Any

import jinja2
from jinja2.exceptions import SecurityError
from jinja2.nodes import EvalContext
from jinja2.sandbox import ImmutableSandboxedEnvironment

MAX_RENDER_S = 2.0
MAX_OUTPUT_CHARS = 2_000_000
MAX_VALUE_CHARS = 2_000_000
_FORMAT_NUMBER = re.compile(r"\d+")
_TEMPLATE_FILES = frozenset({"<template>"})


class TemplateLimitError(SecurityError):
    """A template render went past one of this module's bounds; the message says which."""


_render = threading.local()  # this thread's render deadline (monotonic seconds), while one runs


def _check_time() -> None:
    # Also checked from filters and calls: their Python frames are not the template's, and a
    # filter over a generator can run long without a template line in between.
    end = getattr(_render, "end", None)
    if end is not None and time.monotonic() > end:
        raise TemplateLimitError(f"template: rendering took over {MAX_RENDER_S} s")


def _size(value: Any) -> int:
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, list | tuple | dict | set | frozenset):
        return len(value) + sum(len(v) for v in value if isinstance(v, str))
    if isinstance(value, Sized):  # a range, a dict view...
        return len(value)
    return 1


def _sized(value: Any) -> Any:
    # A generator (``map``, ``select``...) has no length to bound a filter by: take it whole first. Its
    # sources are bounded (``range`` by the sandbox, values by this module), so this is too.
    if isinstance(value, Iterator):
        items = []
        for item in value:
            _check_time()
            items.append(item)
            if len(items) > MAX_VALUE_CHARS:
                raise TemplateLimitError(f"template: a sequence of over {MAX_VALUE_CHARS} items")
        return items
    return value


def _widths(value: Any) -> int:
    # The largest number a format string holds: a width or precision it may pad to.
    if not isinstance(value, str):
        return 0
    numbers = _FORMAT_NUMBER.findall(value[:10_000])
    return max((int(n) if len(n) <= 18 else 10**18 for n in numbers), default=0)


def _check(estimate: float, what: str) -> None:
    if estimate > MAX_VALUE_CHARS:
        raise TemplateLimitError(f"template: {what} would be over {MAX_VALUE_CHARS} characters")


def _estimate(args: tuple[Any, ...], kwargs: dict[str, Any]) -> float:
    """A bound on what a call on these arguments can produce: the first times (1 + the others)."""
    values = [*args, *kwargs.values()]
    if not values:
        return 0
    numbers = [abs(v) for v in values[1:] if isinstance(v, int) and not isinstance(v, bool)]
    others = sum(_size(v) for v in values[1:] if not isinstance(v, int))
    return _size(values[0]) * (1 + others + max(numbers, default=0))


def _bounded_filter(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        _check_time()
        args = tuple(_sized(a) for a in args)
        # Filters receive the environment/context first for some pass_arg kinds: skip them.
        values = tuple(a for a in args if not isinstance(a, jinja2.Environment | jinja2.runtime.Context | EvalContext))
        estimate = _estimate(values, kwargs)
        if name == "format" and values:
            estimate += _widths(values[0]) * (1 + len(values))
        _check(estimate, f"the filter {name!r}")
        result = function(*args, **kwargs)
        _check(_size(result), f"the filter {name!r}")
        return result

    return bounded


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """The environment prompt templates compile in; see the module docstring."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.template_class = BoundedTemplate
        self.globals.pop("namespace", None)  # the one mutable value a template could carry across iterations
        self.filters = {name: _bounded_filter(name, f) for name, f in self.filters.items()}

    def call_binop(self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any) -> Any:
        _check_time()
        numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (left, right))
        if operator == "**" and numbers and abs(left) > 1 and right > 0:
            if right * math.log10(abs(left)) > 1000:
                raise TemplateLimitError("template: a power of over 1,000 digits")
        elif operator == "*" and not numbers:
            count = right if isinstance(right, int) else left if isinstance(left, int) else 1
            _check(_size(left if isinstance(right, int) else right) * max(count, 0), "a repetition")
        elif operator == "+" and not numbers:
            _check(_size(left) + _size(right), "a concatenation")
        elif operator == "%" and isinstance(left, str):
            _check(_size(left) + _size(right) + _widths(left) * (1 + _size(right)), "a %-format")
        return super().call_binop(context, operator, left, right)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """``str.format``, sandboxed by Jinja, and refused when its widths would pad past the bound."""
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        owner = value.__self__
        inner = wrapped

        def bounded(*args: Any, **kwargs: Any) -> str:
            given = [*args, *kwargs.values()]
            _check(_size(owner) + sum(_size(v) for v in given) + _widths(owner) * (1 + len(given)), "a str.format")
            return inner(*args, **kwargs)

        return bounded

    def call(self, __context: jinja2.runtime.Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        _check_time()
        owner = getattr(__obj, "__self__", None)
        bound = (owner, *args) if isinstance(owner, str | list | tuple | dict) else args
        estimate = _estimate(tuple(bound), {k: v for k, v in kwargs.items() if not k.startswith("_")})
        if not isinstance(owner, str | list | tuple | dict):  # a macro or a global: each argument as given
            estimate = max((_size(a) for a in (*args, *kwargs.values())), default=0)
        _check(estimate, "a call")
        result = super().call(__context, __obj, *args, **kwargs)
        _check(_size(result), "a call")
        return result


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise :class:`TemplateLimitError` in the template's frames once ``seconds`` have passed."""
    end = time.monotonic() + seconds
    previous, outer = sys.gettrace(), getattr(_render, "end", None)
    _render.end = end if outer is None else min(end, outer)

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line" and time.monotonic() > end:
            raise TemplateLimitError(f"template: rendering took over {seconds} s")
        return local

    def calls(frame: FrameType, event: str, arg: Any) -> Any:
        # only the template's own frames (loops, macros): everything else runs untraced, at full speed
        return local(frame, event, arg) if frame.f_code.co_filename in _TEMPLATE_FILES else None

    sys.settrace(calls)
    try:
        yield
    finally:
        sys.settrace(previous)
        _render.end = outer


class BoundedTemplate(jinja2.Template):
    """A template whose render is bounded in time and output (see the module docstring)."""

    def render(self, *args: Any, **kwargs: Any) -> str:
        chunks: list[str] = []
        size = 0
        with _deadline(MAX_RENDER_S):
            for chunk in self.generate(*args, **kwargs):
                size += len(chunk)
                if size > MAX_OUTPUT_CHARS:
                    raise TemplateLimitError(f"template: the output is over {MAX_OUTPUT_CHARS} characters")
                chunks.append(chunk)
        return "".join(chunks)


def environment() -> BoundedSandbox:
    """The environment task prompts compile in (strict undefined, no autoescape)."""
    return BoundedSandbox(undefined=jinja2.StrictUndefined, keep_trailing_newline=False, autoescape=False)


def compact_json(value: Any) -> str:
    """JSON without optional whitespace, non-ASCII kept as is (fewer tokens)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
