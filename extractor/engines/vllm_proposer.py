"""Drafts for constrained answers: the grammar's forced tokens, or what the prompt says comes next.

In an extraction answer most tokens are decided before the model is asked. The schema forces keys,
quotes and commas (and the rest of an enum value once its first token is out); llguidance knows
those (``LLMatcher.compute_ff_tokens``, its fast-forward tokens), vLLM 0.26 does not use them. The
values are copied from the text, and the keys of a task's worked examples are in the prompt too, so
the tokens after the answer's last token are often the ones after that token in the prompt (vLLM's
prompt lookup, ``NgramProposer``). Here both become speculative drafts: the model checks them all
in one forward step, under the grammar's masks, and keeps those it agrees with, so a run of decided
tokens costs one decoding step instead of one each. The answer is always the model's own, exactly
as without drafts (greedy answers are equal, ``tests/test_engine_process.py``).

Two parts, no patch to vLLM's source tree:

- ``GrammarDrafts``, vLLM's ``custom_class`` proposer (``speculative_config={"method":
  "custom_class", "model": PROPOSER, ...}``), runs in the model runner, which has no grammar: vLLM's
  prompt lookup (a match of 1-5 tokens), for every sequence.
- ``register``, the plugin hook (entry point ``vllm.general_plugins: extractor_proposer``), wraps the
  scheduler's ``update_draft_token_ids``, which vLLM calls with those drafts after it cut each to
  what the request's grammar accepts: a request under a llguidance grammar gets its grammar's forced
  tokens instead when they are at least as many; a request without a grammar gets none, so free
  text decodes as without speculation. The hook acts only when the engine's proposer is
  ``GrammarDrafts``: another application's speculation is left alone.

What it is worth (``bench/results/drafts.md``). On SmolLM2's greedy SNIPS answers (28 lines, k = 4)
these drafts hold 2.67 tokens per decoding step for the task schema and 2.57 for the substring
grammar, against 2.44 and 2.12 with vLLM's prompt lookup as we had it (2-5 token matches) and 1.19
and 1.65 from forced tokens alone. It still does not pay on vLLM 0.26: a ``custom_class`` proposer
turns async scheduling off, and on an H200 that cost more than the drafts saved (constrained
output 0.75-0.94x of the same engine without drafts, SmolLM2 and a 7B-class model alike; free text
0.61-0.72x). So it is off by default (``EXTRACTOR_SPECULATIVE_METHOD=grammar`` with
``EXTRACTOR_SPECULATIVE_TOKENS=4`` turns it on); it waits for a vLLM that schedules such drafts
asynchronously. With ``EXTRACTOR_MASK_THREADS`` set, the masks of every draft position are filled
by llguidance's pool in one call (``vllm_masks``); vLLM's own fill walks them one after another.
"""

from __future__ import annotations

import logging
from typing import Any

from extractor.engines import vllm_masks

log = logging.getLogger("vllm.extractor_proposer")

PROPOSER = "extractor.engines.vllm_proposer.GrammarDrafts"
LOOKUP = (1, 5)  # prompt lookup: the longest match of 1 to 5 tokens (vLLM's ngram default is 5 to 5)


def speculative_config(tokens: int) -> dict[str, Any]:
    """The engine's ``speculative_config`` for these drafts, up to ``tokens`` per step."""
    return {"method": "custom_class", "model": PROPOSER, "num_speculative_tokens": tokens}


def _lookup_class() -> Any:
    from vllm.v1.spec_decode.ngram_proposer import NgramProposer

    return NgramProposer


class GrammarDrafts:
    """vLLM's proposer class: prompt-lookup drafts (the scheduler hook weighs them against forced tokens)."""

    def __init__(self, vllm_config: Any) -> None:
        self.tokens = int(vllm_config.speculative_config.num_speculative_tokens)
        self._lookup = _lookup_class()(vllm_config)  # built with custom_class's 0-0 match lengths: set ours
        self._lookup.min_n, self._lookup.max_n = LOOKUP

    def load_model(self, *_: Any, **__: Any) -> None:
        """No weights (vLLM's CPU runner calls this on every proposer)."""

    def propose(
        self, sampled_token_ids: list[list[int]], num_tokens_no_spec: Any, token_ids_cpu: Any, **_: Any
    ) -> list[list[int]]:
        drafts: list[list[int]] = self._lookup.propose(
            self.tokens, sampled_token_ids, num_tokens_no_spec, token_ids_cpu
        )
        return drafts


def forced_drafts(matcher: Any, limit: int) -> list[int]:
    """The tokens ``matcher``'s grammar forces next, at most ``limit`` (none once it has stopped)."""
    if limit <= 0 or matcher.is_stopped() or matcher.is_error():
        return []
    return list(matcher.compute_ff_tokens()[:limit])


def _ours(scheduler: Any) -> int:
    """``num_speculative_tokens`` when the engine's proposer is ``GrammarDrafts``, else 0 (cached)."""
    tokens = getattr(scheduler, "_extractor_forced_tokens", None)
    if tokens is None:
        config = scheduler.vllm_config.speculative_config
        ours = config is not None and config.method == "custom_class" and config.model == PROPOSER
        tokens = int(config.num_speculative_tokens) if ours else 0
        scheduler._extractor_forced_tokens = tokens
    return int(tokens)


def register() -> None:
    """The plugin hook vLLM calls in every engine process: wrap the scheduler's draft update; idempotent."""
    try:
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.structured_output.backend_guidance import GuidanceGrammar
    except ImportError as error:  # another vLLM layout: prompt lookup alone
        log.warning("vLLM's scheduler not found (%s): drafts from prompt lookup alone", error)
        return
    original = Scheduler.update_draft_token_ids
    if getattr(original, "__extractor_proposer__", False):
        return

    def update_draft_token_ids(self: Any, draft_token_ids: Any) -> None:
        original(self, draft_token_ids)
        limit = _ours(self)
        if not limit:
            return
        manager = self.structured_output_manager
        for request_id in draft_token_ids.req_ids:
            request = self.requests.get(request_id)
            if request is None or request.is_finished() or request.is_prefill_chunk:
                continue
            structured = request.structured_output_request
            if structured is None:
                request.spec_token_ids = []  # free text: decoded as without speculation
                continue
            grammar = structured.grammar
            if not isinstance(grammar, GuidanceGrammar) or grammar.is_terminated():
                continue  # another backend, or done: vLLM's checked lookup drafts stand
            if not vllm_masks.constrained(manager, request):
                continue
            forced = forced_drafts(grammar.ll_matcher, limit)
            if len(forced) >= len(request.spec_token_ids):
                request.spec_token_ids = forced

    update_draft_token_ids.__extractor_proposer__ = True  # type: ignore[attr-defined]
    Scheduler.update_draft_token_ids = update_draft_token_ids  # type: ignore[method-assign]
