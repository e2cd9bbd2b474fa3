"""The mask pool hook: llguidance's pool fills the same token masks as vLLM's own fill, or stays out.

The plugin's ``grammar_bitmask`` runs on a manager object that holds only what it reads, with real
llguidance matchers of the shipped tasks' grammars on the default model's tokenizer, advanced
through real answers; each expected row is what vLLM's fill writes there (the grammar's own
``fill_bitmask``, or every token once the grammar ended).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from extractor import Catalog, Settings
from extractor.vllm_plugins import masks as vllm_masks

torch = pytest.importorskip("torch")
llguidance = pytest.importorskip("llguidance")
llguidance_torch = pytest.importorskip("llguidance.torch")
structured = pytest.importorskip("vllm.v1.structured_output")
guidance = pytest.importorskip("vllm.v1.structured_output.backend_guidance")

ANSWERS = {
    "snips_get_weather": '{"timeRange":"tomorrow morning","city":"new york"}',
    "snips_play_music": '{"artist":"the beatles","service":"spotify"}',
    "snips_book_restaurant": '{"party_size_number":"4","restaurant_type":"sushi bar"}',
}


def manager(lt: Any, rows: int, speculative: int = 0) -> Any:
    """What ``grammar_bitmask`` reads of a manager, the bitmask allocated by vLLM's guidance backend."""
    config = SimpleNamespace(
        num_speculative_tokens=speculative,
        scheduler_config=SimpleNamespace(max_num_seqs=rows),
        model_config=SimpleNamespace(is_diffusion=False),
    )
    backend = SimpleNamespace(
        allocate_token_bitmask=lambda rows: llguidance_torch.allocate_token_bitmask(rows, lt.vocab_size)
    )
    return SimpleNamespace(
        vllm_config=config,
        backend=backend,
        _grammar_bitmask=None,
        _full_mask=torch.tensor(-1, dtype=torch.int32),
        should_fill_bitmask=lambda request: True,  # vLLM 0.26; 0.32 asks for the bounds
        _get_constraint_bounds=lambda request, spec: SimpleNamespace(constraint_start=0),
    )


def batch(catalog: Catalog, tokenizers: tuple[Any, Any], copies: int) -> tuple[dict[str, Any], list[str]]:
    """Requests of three tasks, each advanced a different number of tokens into its answer; one finished."""
    hf, lt = tokenizers
    requests: dict[str, Any] = {}
    for copy in range(copies):
        for name, answer in ANSWERS.items():
            schema = catalog.get(name).engine_schema
            grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": False})
            matcher = llguidance.LLMatcher(lt, grammar)
            ids = hf.encode(answer, add_special_tokens=False)
            ending = copy == copies - 1 and name == "snips_play_music"
            steps = len(ids) if ending else copy % len(ids)
            assert matcher.consume_tokens(ids[:steps]), matcher.get_error()
            held = guidance.GuidanceGrammar(ll_matcher=matcher, ll_tokenizer=lt, vocab_size=lt.vocab_size)
            if ending:
                assert held.accept_tokens("r", [lt.eos_token])
            requests[f"{name}-{copy}"] = SimpleNamespace(structured_output_request=SimpleNamespace(grammar=held))
    return requests, list(requests)


def vllm_fill(lt: Any, requests: dict[str, Any], ids: list[str]) -> np.ndarray:
    """Each row as vLLM's fill makes it, no drafts: the grammar's own ``fill_bitmask``, every token once it ended."""
    return vllm_draft_fill(lt, requests, ids, {})


def test_the_pool_fills_the_masks_vllm_fills(
    catalog: Catalog, tokenizers: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, lt = tokenizers
    requests, ids = batch(catalog, tokenizers, copies=5)
    expected = vllm_fill(lt, requests, ids)
    original = structured.StructuredOutputManager.grammar_bitmask
    monkeypatch.setattr(structured.StructuredOutputManager, "grammar_bitmask", original)
    monkeypatch.setenv(vllm_masks.ENV, "2")
    vllm_masks.install()
    vllm_masks.install()  # idempotent: one wrapper
    patched = structured.StructuredOutputManager.grammar_bitmask
    assert patched is not original and patched.__extractor_masks__
    ours = manager(lt, len(ids) + 3)
    got = patched(ours, requests, ids, {})
    assert got.shape == expected.shape == (len(ids), (lt.vocab_size + 31) // 32)
    assert np.array_equal(got, expected)
    finished = ids.index("snips_play_music-4")
    assert (got[finished] == -1).all()  # a finished grammar lets every token through, as vLLM's fill does
    assert not (got[0] == -1).all()  # a live one does not


def vllm_draft_fill(lt: Any, requests: dict[str, Any], ids: list[str], drafts: dict[str, list[int]]) -> np.ndarray:
    """vLLM's fill with drafts: per request a row per draft position and one after them, the grammar walked
    through its drafts and rolled back."""
    rows = llguidance_torch.allocate_token_bitmask(len(ids) + sum(map(len, drafts.values())), lt.vocab_size)
    row = 0
    for request_id in ids:
        grammar = requests[request_id].structured_output_request.grammar
        draft = drafts.get(request_id, [])
        for position in range(len(draft) + 1):
            if grammar.is_terminated():
                rows[row].fill_(-1)
            else:
                grammar.fill_bitmask(rows, row)
            if position < len(draft):
                assert grammar.accept_tokens(request_id, [draft[position]])
            row += 1
        grammar.rollback(len(draft))
    filled: np.ndarray = rows.numpy()
    return filled


def test_steps_with_drafts_get_a_row_per_draft_position_from_the_pool(
    catalog: Catalog, tokenizers: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Speculative drafts: forced tokens for some requests, the answer's next tokens for others, none for the rest."""
    hf, lt = tokenizers
    requests, ids = batch(catalog, tokenizers, copies=3)
    drafts: dict[str, list[int]] = {}
    for number, request_id in enumerate(ids):
        grammar = requests[request_id].structured_output_request.grammar
        if grammar.is_terminated() or number % 3 == 2:
            continue
        name, copy = request_id.rsplit("-", 1)
        answer = hf.encode(ANSWERS[name], add_special_tokens=False)
        ahead = answer[int(copy) % len(answer) :][:3]
        forced = list(grammar.ll_matcher.compute_ff_tokens()[:4])
        drafts[request_id] = (forced or ahead) if number % 3 == 0 else ahead
    assert sum(map(bool, drafts.values())) >= 4
    expected = vllm_draft_fill(lt, requests, ids, drafts)
    original = structured.StructuredOutputManager.grammar_bitmask
    monkeypatch.setattr(structured.StructuredOutputManager, "grammar_bitmask", original)
    monkeypatch.setenv(vllm_masks.ENV, "2")
    vllm_masks.install()
    patched = structured.StructuredOutputManager.grammar_bitmask
    got = patched(manager(lt, len(ids), speculative=4), requests, ids, drafts)
    assert np.array_equal(got, expected)
    again = vllm_draft_fill(lt, requests, ids, drafts)
    assert np.array_equal(again, expected)  # every matcher ends where it began


def test_padded_drafts_keep_vllms_fill(
    catalog: Catalog, tokenizers: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Async scheduling pads rejected drafts with -1; vLLM's fill knows what to do with them, so it keeps them."""
    _, lt = tokenizers
    requests, ids = batch(catalog, tokenizers, copies=1)
    calls: list[int] = []

    def vllms(self: Any, requests: Any, ids: list[str], spec: Any) -> None:
        calls.append(len(ids))

    monkeypatch.setattr(structured.StructuredOutputManager, "grammar_bitmask", vllms)
    monkeypatch.setenv(vllm_masks.ENV, "2")
    vllm_masks.install()
    patched = structured.StructuredOutputManager.grammar_bitmask
    patched(manager(lt, len(ids), speculative=2), requests, ids, {ids[0]: [-1, -1]})
    assert calls == [len(ids)]
    patched(manager(lt, len(ids), speculative=2), requests, ids, {})
    assert calls == [len(ids)]  # without padding the pool fills


def test_unset_or_zero_leaves_vllm_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    original = structured.StructuredOutputManager.grammar_bitmask
    monkeypatch.setattr(structured.StructuredOutputManager, "grammar_bitmask", original)
    for value in (None, "0", ""):
        if value is None:
            monkeypatch.delenv(vllm_masks.ENV, raising=False)
        else:
            monkeypatch.setenv(vllm_masks.ENV, value)
        vllm_masks.install()
        assert structured.StructuredOutputManager.grammar_bitmask is original


@pytest.mark.parametrize("value", ["many", "-1"])
def test_a_bad_thread_count_is_named(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(vllm_masks.ENV, value)
    with pytest.raises(ValueError, match=vllm_masks.ENV):
        vllm_masks.install()


def test_a_bad_thread_count_is_named_before_the_engine_starts() -> None:
    from extractor.errors import ConfigError

    with pytest.raises(ConfigError, match="EXTRACTOR_MASK_THREADS: expected a number, got 'lots'"):
        Settings.from_env({"EXTRACTOR_MASK_THREADS": "lots"})
    with pytest.raises(ConfigError, match="EXTRACTOR_MASK_THREADS: -1 threads"):
        Settings.from_env({"EXTRACTOR_MASK_THREADS": "-1"})


def test_the_setting_reaches_vllms_processes_through_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine writes the setting where the hook reads it (vLLM's engine core inherits the environment)."""
    import asyncio

    from extractor.engines import vllm as engine_module
    from extractor.engines.vllm import VLLMEngine

    class StopError(Exception):
        pass

    def stop(*_: Any, **__: Any) -> Any:
        raise StopError

    monkeypatch.setattr(engine_module, "has_cuda", lambda: False)
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    monkeypatch.setenv(vllm_masks.ENV, "0")
    engine = VLLMEngine(Settings.from_env({}, mask_threads=3))
    monkeypatch.setattr(engine, "_engine_args", stop)  # nothing starts
    with pytest.raises(StopError):
        asyncio.run(engine._build())
    assert vllm_masks.threads() == 3


def test_on_cuda_the_pool_is_on_unless_the_user_said_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    from extractor.engines import vllm as engine_module
    from extractor.engines.vllm import cuda_environment

    monkeypatch.setattr(engine_module.os, "cpu_count", lambda: 64)
    fresh: dict[str, str] = {}
    cuda_environment(fresh)
    assert fresh == {"VLLM_WORKER_MULTIPROC_METHOD": "spawn", vllm_masks.ENV: "16"}
    monkeypatch.setattr(engine_module.os, "cpu_count", lambda: 4)
    small: dict[str, str] = {}
    cuda_environment(small)
    assert small[vllm_masks.ENV] == "4"  # never more threads than cores
    chosen = {vllm_masks.ENV: "0", "VLLM_WORKER_MULTIPROC_METHOD": "fork"}
    cuda_environment(chosen)
    assert chosen == {vllm_masks.ENV: "0", "VLLM_WORKER_MULTIPROC_METHOD": "fork"}


def test_on_a_cpu_of_two_cores_the_worker_gets_both_unless_the_user_said_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from extractor.engines import vllm as engine_module
    from extractor.engines.vllm import cpu_environment

    monkeypatch.setattr(engine_module.os, "cpu_count", lambda: 2)
    fresh: dict[str, str] = {}
    cpu_environment(fresh)
    assert fresh == {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    chosen = {"VLLM_CPU_NUM_OF_RESERVED_CPU": "1"}
    cpu_environment(chosen)
    assert chosen == {"VLLM_CPU_NUM_OF_RESERVED_CPU": "1"}
    monkeypatch.setattr(engine_module.os, "cpu_count", lambda: 16)
    larger: dict[str, str] = {}
    cpu_environment(larger)
    assert larger == {}  # vLLM keeps one core for its scheduler there
