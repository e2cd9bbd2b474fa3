"""Tune's engine reads each distinct request once (extractor.engines.memo)."""

from __future__ import annotations

import asyncio

import pytest

from extractor import ScriptedEngine
from extractor.engines.base import GenerationRequest
from extractor.engines.memo import MemoEngine


def ask(text: str, **sampling: object) -> GenerationRequest:
    return GenerationRequest(messages=[{"role": "user", "content": text}], json_schema={"type": "object"}, **sampling)  # type: ignore[arg-type]


async def test_a_request_sent_again_gets_the_first_answer_and_any_difference_is_read_anew() -> None:
    calls: list[str] = []

    def respond(request: GenerationRequest) -> str:
        calls.append(request.messages[0]["content"])
        return f'{{"n": {len(calls)}}}'

    memo = MemoEngine(ScriptedEngine(respond=respond))
    first = await memo.generate(ask("a"))
    assert (await memo.generate(ask("a"))).text == first.text == '{"n": 1}'
    assert (await memo.generate(ask("a", temperature=0.0))).text == '{"n": 2}'  # other sampling: another request
    assert (await memo.generate(ask("b"))).text == '{"n": 3}'
    together = await asyncio.gather(*(memo.generate(ask("c")) for _ in range(3)))  # in flight at once: sent once
    assert {g.text for g in together} == {'{"n": 4}'} and calls == ["a", "a", "b", "c"]
    assert (memo.asked, memo.recalled) == (7, 3)


async def test_a_failed_request_is_not_remembered() -> None:
    failing = [True]

    def respond(request: GenerationRequest) -> str:
        if failing.pop() if failing else False:
            raise RuntimeError("engine down")
        return "{}"

    memo = MemoEngine(ScriptedEngine(respond=respond))
    with pytest.raises(RuntimeError, match="engine down"):
        await memo.generate(ask("a"))
    assert (await memo.generate(ask("a"))).text == "{}"
