"""The OpenAI front on the real engine (the session's vLLM), through the `openai` client."""

from __future__ import annotations

import json

import openai
import pytest
from pydantic import BaseModel, Field

from extractor import Extractor

from . import test_real_engine
from .conftest import LANDMARK_TEXT

pytestmark = pytest.mark.engine
live = test_real_engine.live_server  # that module's fixture (uvicorn on the session engine), here as `live`


class Place(BaseModel):
    """A place named in a sentence."""

    city: str = Field(max_length=30, description="the city, as written")
    country: str = Field(max_length=30, description="the country, as written")


class Landmark(BaseModel):
    name: str | None
    country: str | None
    city: str | None
    category: str | None
    period: str | None


def test_openai_client_on_the_real_engine(live: str, real_extractor: Extractor) -> None:
    client = openai.OpenAI(base_url=f"{live}/v1", api_key="unused", timeout=300)
    models = [m.id for m in client.models.list()]
    assert models[0] == real_extractor.engine.model_name and "landmark_slots" in models
    messages = [
        {"role": "system", "content": "Extract the city and the country. Answer in JSON."},
        {"role": "user", "content": "The Eiffel Tower stands in Paris, France."},
    ]
    parsed = client.chat.completions.parse(model=models[0], messages=messages, response_format=Place, temperature=0)  # type: ignore[arg-type]
    place = parsed.choices[0].message.parsed
    assert isinstance(place, Place), parsed
    extension = parsed.model_extra["extractor"]
    assert 1 <= len(extension["attempts"]) <= 3 and parsed.usage is not None and parsed.usage.completion_tokens > 0
    # vLLM's own token probabilities, under the constraint: a confidence per value, the lowest for the whole
    assert extension["confidences"] and all(0.0 < c <= 1.0 for c in extension["confidences"].values())
    assert extension["confidence"] == min(extension["confidences"].values())
    # the catalog task: its own prompt and worked examples
    task = client.chat.completions.parse(
        model="landmark_slots", messages=[{"role": "user", "content": LANDMARK_TEXT}], response_format=Landmark
    )
    landmark = task.choices[0].message.parsed
    assert landmark is not None and landmark.name
    # a stream reassembles to the JSON a non-streamed call gives (greedy, the same schema)
    fmt = {"type": "json_schema", "json_schema": {"name": "Place", "schema": Place.model_json_schema()}}
    whole = client.chat.completions.create(model=models[0], messages=messages, response_format=fmt, temperature=0)  # type: ignore[arg-type]
    stream = client.chat.completions.create(
        model=models[0],
        messages=messages,
        response_format=fmt,
        temperature=0,
        stream=True,  # type: ignore[arg-type]
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert json.loads(text) == json.loads(whole.choices[0].message.content or "")
