"""Drafts for constrained answers: forced tokens from the grammar, prompt lookup, the scheduler hook.

The hook runs on vLLM's own ``Scheduler.update_draft_token_ids`` (its original replaced by one
that stores the drafts as vLLM does after checking them), on requests holding real llguidance
matchers of shipped task schemas on the default tokenizer. The engine test starts vLLM with the
proposer and compares its greedy answers with the session engine's, which has none.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from extractor import Catalog, Settings
from extractor.engines import vllm_proposer
from extractor.engines.vllm import VLLMEngine, speculation
from extractor.errors import ConfigError

llguidance = pytest.importorskip("llguidance")
scheduler_module = pytest.importorskip("vllm.v1.core.sched.scheduler")
guidance = pytest.importorskip("vllm.v1.structured_output.backend_guidance")


def matcher(catalog: Catalog, lt: Any, task: str = "snips_get_weather") -> Any:
    schema = catalog.get(task).engine_schema
    return llguidance.LLMatcher(
        lt, llguidance.LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": False})
    )


def test_forced_drafts_are_what_the_grammar_decides(catalog: Catalog, tokenizers: tuple[Any, Any]) -> None:
    """landmark_slots requires every key in order: its keys and punctuation are forced, its values are not."""
    hf, lt = tokenizers
    m = matcher(catalog, lt, "landmark_slots")
    forced = vllm_proposer.forced_drafts(m, 4)
    assert hf.decode(forced) == '{"name'
    assert vllm_proposer.forced_drafts(m, 1) == forced[:1]
    assert vllm_proposer.forced_drafts(m, 0) == []
    assert m.consume_tokens(hf.encode('{"name":null,"country":"x"', add_special_tokens=False))
    assert hf.decode(vllm_proposer.forced_drafts(m, 4)) == ',"city'
    assert m.consume_tokens(hf.encode(',"city":null,"category":null,"period":null}', add_special_tokens=False))
    assert m.consume_token(lt.eos_token)
    assert vllm_proposer.forced_drafts(m, 4) == []  # stopped: nothing left to force


def test_the_speculative_config_names_the_proposer_and_settings_check_the_method() -> None:
    assert speculation(4, "grammar") == {
        "method": "custom_class",
        "model": "extractor.engines.vllm_proposer.GrammarDrafts",
        "num_speculative_tokens": 4,
    }
    settings = Settings.from_env({"EXTRACTOR_SPECULATIVE_TOKENS": "3", "EXTRACTOR_SPECULATIVE_METHOD": "grammar"})
    assert VLLMEngine(settings)._engine_args().speculative_config["model"] == vllm_proposer.PROPOSER
    assert Settings.from_env({}).speculative_method == "ngram"
    with pytest.raises(ConfigError, match="EXTRACTOR_SPECULATIVE_METHOD: unknown proposer 'eagle'"):
        Settings.from_env({"EXTRACTOR_SPECULATIVE_METHOD": "eagle"})


def test_the_proposer_offers_what_follows_in_the_prompt() -> None:
    config = SimpleNamespace(
        speculative_config=SimpleNamespace(num_speculative_tokens=3, prompt_lookup_min=0, prompt_lookup_max=0),
        model_config=SimpleNamespace(max_model_len=256),
        scheduler_config=SimpleNamespace(max_num_seqs=4),
        parallel_config=SimpleNamespace(tensor_parallel_size=1),
    )
    proposer = vllm_proposer.GrammarDrafts(config)
    proposer.load_model()  # vLLM's CPU runner calls it
    tokens = np.zeros((2, 256), dtype=np.int32)
    context = [5, 6, 7, 8, 9, 1, 2, 6]  # the last token (6) was followed by 7, 8, 9 earlier
    tokens[0, : len(context)] = context
    tokens[1, :3] = [1, 2, 3]  # nothing to look up
    drafts = proposer.propose([[6], [3]], np.array([len(context), 3], dtype=np.int32), tokens)
    assert [list(d) for d in drafts] == [[7, 8, 9], []]


def _scheduler(requests: dict[str, Any], proposer: str) -> Any:
    method = "custom_class" if proposer == vllm_proposer.PROPOSER else "ngram"
    config = SimpleNamespace(
        speculative_config=SimpleNamespace(method=method, model=proposer, num_speculative_tokens=4)
    )
    manager = SimpleNamespace(
        should_fill_bitmask=lambda request: True,  # vLLM 0.26; 0.32 asks for the bounds
        _get_constraint_bounds=lambda request, spec: SimpleNamespace(constraint_start=0),
    )
    return SimpleNamespace(vllm_config=config, structured_output_manager=manager, requests=requests)


def _request(grammar: Any = None) -> Any:
    return SimpleNamespace(
        spec_token_ids=[],
        is_prefill_chunk=False,
        is_finished=lambda: False,
        structured_output_request=None if grammar is None else SimpleNamespace(grammar=grammar),
    )


def _hooked(monkeypatch: pytest.MonkeyPatch) -> Any:
    def vllms(self: Any, drafts: Any) -> None:  # what vLLM does: the (checked) drafts become the request's
        for request_id, ids in zip(drafts.req_ids, drafts.draft_token_ids, strict=True):
            self.requests[request_id].spec_token_ids = list(ids)

    monkeypatch.setattr(scheduler_module.Scheduler, "update_draft_token_ids", vllms)
    vllm_proposer.register()
    vllm_proposer.register()  # idempotent: one wrapper
    hooked = scheduler_module.Scheduler.update_draft_token_ids
    assert hooked is not vllms and hooked.__extractor_proposer__
    return hooked


def test_the_hook_gives_constrained_requests_the_longer_drafts_and_free_text_none(
    catalog: Catalog, tokenizers: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, lt = tokenizers
    hooked = _hooked(monkeypatch)
    grammars = [
        guidance.GuidanceGrammar(
            ll_matcher=matcher(catalog, lt, "landmark_slots"), ll_tokenizer=lt, vocab_size=lt.vocab_size
        )
        for _ in range(2)
    ]
    forced = vllm_proposer.forced_drafts(grammars[0].ll_matcher, 4)
    assert 0 < len(forced) < 4
    longer = [*forced, 13]
    requests = {"short": _request(grammars[0]), "long": _request(grammars[1]), "free": _request()}
    drafts = SimpleNamespace(req_ids=["short", "long", "free"], draft_token_ids=[[], longer, [7, 8]])
    hooked(_scheduler(requests, vllm_proposer.PROPOSER), drafts)
    assert requests["short"].spec_token_ids == forced  # the grammar's, when the lookup found fewer
    assert requests["long"].spec_token_ids == longer  # the lookup's, when longer
    assert requests["free"].spec_token_ids == []  # free text: no drafts

    for request in requests.values():
        request.spec_token_ids = []
    hooked(_scheduler(requests, "ngram"), drafts)  # another proposer: vLLM's drafts stand
    assert [r.spec_token_ids for r in requests.values()] == [[], longer, [7, 8]]
