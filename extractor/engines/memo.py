"""An engine that reads a request it has already read once: what ``extractor tune`` measures through.

Tune reads the same documents under several settings, and many of their requests are the same:
a field whose reading a variant leaves as it was, the first passage of ``start`` and of the learned
``from: start``, a field that is not expected under ``unexpected`` either. Each such request costs a
reading again, for the same answer at a low temperature, or for a different draw that only adds
noise between candidates that asked the same thing. Through :class:`MemoEngine` a request equal to
one already sent (messages, constraint, sampling) gets that request's generation: tune's time goes to
what differs between its candidates, and their paired comparison reads the same answers where they
asked the same.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Sequence

from extractor.engines.base import Engine, Generation, GenerationRequest, Message


def request_key(request: GenerationRequest) -> str:
    """A request's identity: its chat, constraint and sampling (requests equal in all three are one)."""
    return json.dumps(dataclasses.asdict(request), sort_keys=True, default=str)


class MemoEngine:
    """``engine``, each distinct request sent to it once (identical requests in flight share one)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._answers: dict[str, asyncio.Future[Generation]] = {}
        self.asked = 0  # requests received
        self.recalled = 0  # of them, answered from an earlier one

    @property
    def model_name(self) -> str:
        return self.engine.model_name

    @property
    def max_model_len(self) -> int:
        return self.engine.max_model_len

    async def start(self) -> None:
        await self.engine.start()

    async def generate(self, request: GenerationRequest) -> Generation:
        self.asked += 1
        key = request_key(request)
        found = self._answers.get(key)
        if found is None:
            found = self._answers[key] = asyncio.ensure_future(self.engine.generate(request))
        else:
            self.recalled += 1
        try:
            return await asyncio.shield(found)
        except BaseException:
            if found.done() and self._answers.get(key) is found:
                del self._answers[key]  # a failed request is sent again next time, not remembered
            raise

    def count_prompt_tokens(self, messages: Sequence[Message]) -> int:
        return self.engine.count_prompt_tokens(messages)

    async def close(self) -> None:
        for answer in self._answers.values():
            answer.cancel()  # a request whose every caller was stopped (tune's budget spent) is not read on
        self._answers.clear()
        await self.engine.close()
