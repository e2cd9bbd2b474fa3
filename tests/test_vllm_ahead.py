"""The next step's masks filled ahead (``vllm_ahead``): the same masks as vLLM's own advance and fill, step by step.

Real llguidance grammars of the shipped tasks on the default model's tokenizer, walked through real
answers; a scheduler that does to grammars what vLLM's ``update_from_output`` does (each scheduled
request's tokens to its grammar's ``accept_tokens``), told at times to advance a grammar by other
tokens than were sampled, or not at all, as vLLM may.
"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from extractor import Catalog, Extractor, Settings
from extractor.engines import vllm_ahead, vllm_masks

from .test_vllm_masks import ANSWERS, manager, vllm_fill

llguidance = pytest.importorskip("llguidance")
llguidance_torch = pytest.importorskip("llguidance.torch")
structured = pytest.importorskip("vllm.v1.structured_output")
guidance = pytest.importorskip("vllm.v1.structured_output.backend_guidance")
scheduler_module = pytest.importorskip("vllm.v1.core.sched.scheduler")


class Scheduler:
    """vLLM's update as far as grammars go; ``instead``: request id -> the tokens vLLM advances it by (None: none)."""

    def __init__(self, manager: Any, requests: dict[str, Any]) -> None:
        self.structured_output_manager = manager
        self.requests = requests
        self.instead: dict[str, list[int] | None] = {}

    def update_from_output(self, scheduler_output: Any, model_output: Any) -> dict[int, Any]:
        for request_id in scheduler_output.num_scheduled_tokens:
            sampled = model_output.sampled_token_ids[model_output.req_id_to_index[request_id]]
            tokens = self.instead.get(request_id, sampled)
            if tokens:
                request = self.requests[request_id]
                request.rejected |= not request.structured_output_request.grammar.accept_tokens(request_id, tokens)
        return {}


def fresh() -> tuple[Any, Any]:
    """A scheduler class and a grammar class of this test's own, masks ahead installed on them (a pool of 2)."""

    class Sched(Scheduler):
        pass

    class Ours(guidance.GuidanceGrammar):  # type: ignore[misc,name-defined]
        pass

    assert vllm_ahead.install(llguidance.LLExecutor(2), Sched, Ours, vllm_masks.constrained)
    return Sched, Ours


def in_order(catalog: Catalog, name: str) -> str:
    """The answer with its keys in the schema's order (the grammar's)."""
    values = json.loads(ANSWERS[name])
    keys = catalog.get(name).engine_schema["properties"]
    return json.dumps({key: values[key] for key in keys if key in values}, separators=(",", ":"))


def requests_of(catalog: Catalog, lt: Any, cls: Any, copies: int) -> dict[str, Any]:
    made = {}
    for copy in range(copies):
        for name in ANSWERS:
            schema = catalog.get(name).engine_schema
            grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": False})
            held = cls(ll_matcher=llguidance.LLMatcher(lt, grammar), ll_tokenizer=lt, vocab_size=lt.vocab_size)
            request = SimpleNamespace(
                use_structured_output=True, structured_output_request=SimpleNamespace(grammar=held), rejected=False
            )
            request.is_finished = lambda held=held: held.is_terminated()
            made[f"{name}-{copy}"] = request
    return made


@pytest.fixture
def patched(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The plugin's grammar_bitmask (its ahead part installed on the tests' own classes); vLLM's put back after."""
    monkeypatch.setattr(
        structured.StructuredOutputManager, "grammar_bitmask", structured.StructuredOutputManager.grammar_bitmask
    )
    monkeypatch.setattr(scheduler_module.Scheduler, "update_from_output", scheduler_module.Scheduler.update_from_output)
    monkeypatch.setattr(guidance.GuidanceGrammar, "accept_tokens", guidance.GuidanceGrammar.accept_tokens)
    monkeypatch.setenv(vllm_masks.ENV, "2")
    monkeypatch.delenv(vllm_ahead.ENV, raising=False)
    vllm_masks.register()
    return structured.StructuredOutputManager.grammar_bitmask


def test_masks_filled_ahead_are_vllms_at_every_step(
    catalog: Catalog, tokenizers: tuple[Any, Any], patched: Any
) -> None:
    """Whole answers to the stop token; one grammar advanced by two tokens in one step, one not advanced in a
    step (both as vLLM may do it): every step's masks are those of vLLM's own advance and fill."""
    hf, lt = tokenizers
    scheduler_class, ours_class = fresh()
    theirs, ours = requests_of(catalog, lt, guidance.GuidanceGrammar, 2), requests_of(catalog, lt, ours_class, 2)
    assert not vllm_ahead.install(llguidance.LLExecutor(2), scheduler_class, ours_class, vllm_masks.constrained)
    names = {rid: rid.rsplit("-", 1)[0] for rid in ours}
    answers = {
        rid: [*hf.encode(in_order(catalog, n), add_special_tokens=False), lt.eos_token] for rid, n in names.items()
    }
    at = dict.fromkeys(ours, 0)
    mine = manager(lt, len(ours))
    scheduler = scheduler_class(mine, ours)
    filled_ahead = 0
    for step in range(100):
        live = [rid for rid in ours if not ours[rid].is_finished()]
        if not live:
            break
        sampled = {rid: [answers[rid][at[rid]]] for rid in live}
        scheduler.instead = {}
        if step == 3:
            rid = live[0]
            scheduler.instead[rid] = answers[rid][at[rid] : at[rid] + 2]  # two tokens where one was sampled
        if step == 2:
            scheduler.instead[live[-1]] = None  # vLLM did not advance this one
        given = {rid: scheduler.instead.get(rid, sampled[rid]) for rid in live}
        for rid, tokens in given.items():
            if tokens:
                assert theirs[rid].structured_output_request.grammar.accept_tokens(rid, tokens)
                at[rid] += len(tokens)
        scheduler.update_from_output(
            SimpleNamespace(num_scheduled_tokens=dict.fromkeys(live, 1)),
            SimpleNamespace(
                sampled_token_ids=[sampled[rid] for rid in live], req_id_to_index={r: i for i, r in enumerate(live)}
            ),
        )
        early = mine._extractor_ahead
        filled_ahead += 0 if early is None else len(early.picked)
        ids = [rid for rid in ours if not ours[rid].is_finished()]
        if ids:
            got = patched(mine, ours, ids, {})
            assert np.array_equal(got, vllm_fill(lt, theirs, ids)), f"step {step}"
    assert all(r.is_finished() for r in ours.values()) and not any(r.rejected for r in ours.values())
    assert filled_ahead > 60  # most rows came from the early job


def test_a_rejected_token_is_named_and_the_request_stops_at_its_next(
    catalog: Catalog, tokenizers: tuple[Any, Any], patched: Any, caplog: pytest.LogCaptureFixture
) -> None:
    hf, lt = tokenizers
    scheduler_class, ours_class = fresh()
    ours = dict(list(requests_of(catalog, lt, ours_class, 1).items())[:1])
    (rid,) = ours
    mine = manager(lt, 1)
    bad = hf.encode("hello", add_special_tokens=False)[:1]  # an answer opens with {
    with caplog.at_level("WARNING", logger="vllm.extractor_masks"):
        scheduler_class(mine, ours).update_from_output(
            SimpleNamespace(num_scheduled_tokens={rid: 1}),
            SimpleNamespace(sampled_token_ids=[bad], req_id_to_index={rid: 0}),
        )
        got = patched(mine, ours, [rid], {})
    assert f"grammar rejected token {bad[0]} of request {rid}" in caplog.text
    allowed = np.unpackbits(got[0].view(np.uint8), bitorder="little")[: lt.vocab_size].nonzero()[0]
    assert allowed.tolist() == [lt.eos_token]


def test_off_unless_asked_and_a_bad_value_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        structured.StructuredOutputManager, "grammar_bitmask", structured.StructuredOutputManager.grammar_bitmask
    )
    before = scheduler_module.Scheduler.update_from_output
    monkeypatch.setattr(scheduler_module.Scheduler, "update_from_output", before)
    monkeypatch.setenv(vllm_masks.ENV, "2")
    monkeypatch.delenv(vllm_ahead.ENV, raising=False)
    vllm_masks.register()
    assert scheduler_module.Scheduler.update_from_output is before
    monkeypatch.setenv(vllm_ahead.ENV, "yes")
    with pytest.raises(ValueError, match="EXTRACTOR_MASK_AHEAD: 'yes'; give 1"):
        vllm_ahead.wanted()


def test_a_bad_value_stops_the_engine_before_it_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    from extractor.engines.vllm import VLLMEngine
    from extractor.errors import EngineError

    monkeypatch.setenv(vllm_ahead.ENV, "2")
    with pytest.raises(EngineError, match="EXTRACTOR_MASK_AHEAD: '2'"):
        VLLMEngine(Settings.from_env({})).start_sync()


@pytest.mark.engine
def test_a_real_engine_filling_masks_ahead_answers_as_vllm_alone(
    real_extractor: Extractor, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """vLLM in a process of its own (its engine core loads the plugin afresh) with the pool and masks ahead:
    the same greedy answers and log-probabilities as the session's engine, which has neither."""
    from extractor.engines import create_engine

    from .test_engine_process import TEXTS, _requests

    monkeypatch.setenv(vllm_masks.ENV, "2")
    monkeypatch.setenv(vllm_ahead.ENV, "1")
    settings = Settings.from_env(
        {"EXTRACTOR_ENFORCE_EAGER": "1"},
        engine="vllm",
        engine_process="own",
        adapter_serving="off",
        max_num_seqs=16,
        kv_cache_space_gib=2,
    )
    requests = _requests(real_extractor, tasks=len(TEXTS)) * 2  # several grammars in each step

    async def answers(on: Any) -> list[Any]:
        return list(await asyncio.gather(*(on.generate(r) for r in requests)))

    expected = asyncio.run(answers(real_extractor.engine))
    engine = create_engine(settings)
    engine.start_sync()
    try:
        logged = capfd.readouterr()  # vLLM logs to stdout
        assert "the next step's ahead (EXTRACTOR_MASK_AHEAD=1)" in logged.out + logged.err
        got = asyncio.run(answers(engine))
    finally:
        engine.close_sync()
    assert [g.text for g in got] == [e.text for e in expected]  # some cut at max_tokens 64, on both sides
    assert all(g.completion_tokens > 5 for g in got)
    for mine, theirs in zip(got[1::2], expected[1::2], strict=True):  # the grounded ones, with logprobs
        assert mine.token_ends == theirs.token_ends
        assert mine.token_logprobs == pytest.approx(theirs.token_logprobs, abs=1e-3)


def test_a_vllm_whose_outputs_differ_keeps_its_own_way_and_says_so_once(
    catalog: Catalog, tokenizers: tuple[Any, Any], patched: Any, caplog: pytest.LogCaptureFixture
) -> None:
    _, lt = tokenizers
    scheduler_class, ours_class = fresh()
    ours = requests_of(catalog, lt, ours_class, 1)
    scheduler = scheduler_class(manager(lt, len(ours)), ours)
    odd = SimpleNamespace(sampled_token_ids=[[1]], req_ids=list(ours))  # no req_id_to_index
    with caplog.at_level("WARNING", logger="vllm.extractor_masks"):
        for _ in range(2):
            with pytest.raises(AttributeError):  # vLLM's own update meets it too
                scheduler.update_from_output(SimpleNamespace(num_scheduled_tokens=dict.fromkeys(ours, 1)), odd)
    assert caplog.text.count("not as expected") == 1
