"""The options of one extraction, defined once (extractor/options.py): every carrier agrees with it."""

from __future__ import annotations

import datetime as dt
import inspect
import typing

import pytest

from extractor.errors import InputError
from extractor.options import ExtractOptions, OptionArgs, Options, checked
from extractor.server.openai.protocol import ChatCompletionRequest
from extractor.server.protocol import BatchRequest, ExtractRequest


def test_the_keyword_arguments_are_the_options_fields() -> None:
    model = typing.get_type_hints(ExtractOptions)  # Annotated stripped: the bounds are the model's to check
    assert typing.get_type_hints(OptionArgs) == {name: model[name] for name in ExtractOptions.model_fields}


def test_every_wire_model_carries_the_one_type() -> None:
    assert ExtractRequest.model_fields["options"].annotation is ExtractOptions
    assert BatchRequest.model_fields["options"].annotation is ExtractOptions
    assert ExtractOptions in typing.get_args(ChatCompletionRequest.model_fields["extractor"].annotation)
    assert issubclass(Options, ExtractOptions)


def test_the_python_api_is_typed_from_it() -> None:
    from extractor import api

    for function in (api.Extractor.extract, api.Extractor.aextract, api.extract, api.aextract):
        kwargs = inspect.signature(function).parameters["options"]
        assert kwargs.kind is inspect.Parameter.VAR_KEYWORD and "OptionArgs" in str(kwargs.annotation), function


def test_bad_options_are_an_input_error_naming_the_field() -> None:
    with pytest.raises(InputError, match="max_attempts"):
        checked({"max_attempts": 4})
    with pytest.raises(InputError, match="temprature"):
        checked({"temprature": 0.5})
    assert checked({"reference_date": "2026-12-05"}).reference_date == dt.date(2026, 12, 5)
    assert Options.of(ExtractOptions(chunk=True), top_p=0.5).model_dump(exclude_defaults=True) == {
        "chunk": True,
        "top_p": 0.5,
    }
