"""vLLM in a process of its own (ProcessEngine): chosen where it should be, and it answers as in-process vLLM."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import pickle
import signal
import time
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from extractor import Extractor, Settings
from extractor.catalog.prompting import render
from extractor.config import repo_root
from extractor.constraints import grounded_decoding
from extractor.engines import create_engine
from extractor.engines.base import GenerationRequest
from extractor.engines.merged import MergedAdapters
from extractor.engines.process import ProcessEngine, portable
from extractor.engines.vllm import VLLMEngine
from extractor.errors import ConfigError, EngineDeadError, EngineError


def test_the_child_gets_the_ids_and_a_plain_request() -> None:
    """The chat stays here (its ids go); a task's read-only schema travels as plain dicts and lists."""
    schema = MappingProxyType({"type": "object", "properties": MappingProxyType({"a": {"enum": ("x", "y")}})})
    request = GenerationRequest(
        messages=[{"role": "user", "content": "long text " * 100}], json_schema=schema, stop=["\n"], logprobs=True
    )
    sent = pickle.loads(pickle.dumps(portable(request)))
    assert sent.messages == ()
    assert sent.json_schema == {"type": "object", "properties": {"a": {"enum": ["x", "y"]}}}
    assert (sent.stop, sent.logprobs, sent.max_tokens) == (("\n",), True, request.max_tokens)


def test_where_the_front_end_runs_is_a_setting(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    own = create_engine(Settings(model=str(tmp_path), engine_process="own"))
    shared = create_engine(Settings(model=str(tmp_path), engine_process="shared"))
    auto = create_engine(Settings(model=str(tmp_path)))  # this machine has no GPU: in this process
    assert (type(own), type(shared), type(auto)) == (ProcessEngine, VLLMEngine, VLLMEngine)
    merged = MergedAdapters(Settings.from_env(engine_process="own"), [repo_root() / "adapters" / "snips"])
    assert isinstance(merged._base, ProcessEngine)  # each merged adapter's engine alike
    with pytest.raises(ConfigError, match="EXTRACTOR_ENGINE_PROCESS"):
        Settings.from_env({"EXTRACTOR_ENGINE_PROCESS": "elsewhere"})


def test_an_engine_not_started_says_so(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    engine = ProcessEngine(Settings(model=str(tmp_path)))
    with pytest.raises(EngineError, match="not started"):
        asyncio.run(engine.generate(GenerationRequest(messages=[{"role": "user", "content": "hi"}])))
    engine.close_sync()  # nothing to close: no error


TEXTS = {
    "snips_get_weather": "what will the weather be in new york tomorrow morning",
    "snips_play_music": "play the beatles on spotify",
}


def _requests(extractor: Extractor, tasks: int = 1) -> list[GenerationRequest]:
    """Per task: its schema, then its grounded grammar asking logprobs (as the pipeline's first attempt)."""
    requests = []
    for name, text in list(TEXTS.items())[:tasks]:
        task = extractor.task(name)
        grounded = grounded_decoding.constrain(task.schema, text, everywhere=True)
        assert grounded is not None and grounded.grammar is not None
        messages = render(task, text)
        requests += [
            GenerationRequest(messages=messages, json_schema=task.engine_schema, temperature=0.0, max_tokens=64),
            GenerationRequest(
                messages=messages, grammar=grounded.grammar, temperature=0.0, max_tokens=64, logprobs=True
            ),
        ]
    return requests


def _group_gone(leader: int, wait_s: float = 30.0) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.killpg(leader, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.engine
def test_an_answer_whose_tokens_come_back_reads_its_text_from_them_as_vllm_would(real_extractor: Extractor) -> None:
    """Asking logprobs turns vLLM's detokenizer off for the request: the text from the ids is the same."""
    engine = getattr(real_extractor.engine, "_base", real_extractor.engine)  # the base model's, beside merged ones
    assert isinstance(engine, VLLMEngine)
    grounded = _requests(real_extractor)[1]
    plain = dataclasses.replace(grounded, logprobs=False)
    assert engine._sampling(grounded).detokenize is False and engine._sampling(plain).detokenize is True
    assert engine._sampling(grounded, stream=True).detokenize is True  # a stream's texts come from vLLM

    async def both() -> list[Any]:
        return list(await asyncio.gather(engine.generate(grounded), engine.generate(plain)))

    with_ids, from_vllm = asyncio.run(both())
    assert with_ids.text == from_vllm.text and json.loads(with_ids.text)
    assert len(with_ids.token_logprobs) == len(with_ids.token_ends) == with_ids.completion_tokens
    assert with_ids.token_ends[-1] == len(with_ids.text)


@pytest.mark.engine
@pytest.mark.slow  # an engine of its own with drafts (an experimental lever): make test-slow
def test_vllm_in_its_own_process_with_drafts_answers_as_in_this_one(
    real_extractor: Extractor, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Same greedy answers and log-probabilities; streams; a caller gone aborts; a dead child is named.

    The child's vLLM also takes speculative drafts (vLLM's prompt lookup, checked by the model) and
    has llguidance's pool fill its masks, a row per draft position (the mask pool hook,
    ``extractor.vllm_plugins.masks``: on by default on CUDA only), which must not change a greedy
    answer either. One engine for all three: each start costs minutes on CI's 2 cores.
    """
    settings = Settings.from_env(
        {
            "EXTRACTOR_SPECULATIVE_TOKENS": "4",
            "EXTRACTOR_MASK_THREADS": "2",
            "EXTRACTOR_ENFORCE_EAGER": "1",
        },
        engine="vllm",
        engine_process="own",
        adapter_serving="off",
        max_num_seqs=16,
        kv_cache_space_gib=2,
    )
    engine = create_engine(settings)
    assert isinstance(engine, ProcessEngine)
    requests = _requests(real_extractor, tasks=2)
    chat = GenerationRequest(messages=[{"role": "user", "content": "Name three colours."}], temperature=0.0)

    async def answers(on: Any) -> tuple[list[Any], str]:
        return list(await asyncio.gather(*(on.generate(r) for r in requests))), (await on.generate(chat)).text

    expected, expected_chat = asyncio.run(answers(real_extractor.engine))
    engine.start_sync()
    try:
        logged = capfd.readouterr()  # vLLM logs to stdout
        assert "token masks filled by llguidance's pool of 2 threads" in logged.out + logged.err

        async def checks() -> None:
            got, got_chat = await answers(engine)
            assert [g.text for g in got] == [g.text for g in expected]
            for mine, theirs in zip(got[1::2], expected[1::2], strict=True):  # the grounded ones, with logprobs
                assert mine.token_ends == theirs.token_ends
                # the drafts' tokens are scored in a step of several positions: the same to float noise
                assert mine.token_logprobs == pytest.approx(theirs.token_logprobs, abs=2e-2)
            assert got_chat == expected_chat
            streamed = [text async for text in engine.stream(chat)]
            assert len(streamed) > 1 and streamed[-1] == expected_chat
            # a caller that goes away takes its request out of vLLM's process
            long = GenerationRequest(messages=[{"role": "user", "content": "Write a long story."}], max_tokens=400)
            caller = asyncio.ensure_future(engine.generate(long))
            while engine.unfinished_requests == 0:
                await asyncio.sleep(0.01)
            caller.cancel()
            deadline = time.monotonic() + 30
            while engine.unfinished_requests and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert engine.unfinished_requests == 0

        asyncio.run(checks())
        child = engine._child
        assert child is not None
        os.kill(child.pid, signal.SIGKILL)  # the OOM killer's way
        child.wait(timeout=30)
        time.sleep(0.5)
        with pytest.raises(EngineDeadError, match="exited with code -9"):
            asyncio.run(engine.generate(requests[0]))
        assert _group_gone(child.pid)  # vLLM's engine core and workers went with it (its process group)
    finally:
        engine.close_sync()
