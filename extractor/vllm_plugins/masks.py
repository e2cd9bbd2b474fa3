"""Token masks of a decoding step filled by llguidance's own thread pool (the mask pool hook).

vLLM 0.26 fills the token mask of every structured sequence on its engine core's main thread,
one after another, below 129 such sequences in a step (above, in up to 8 Python threads, 16
sequences each), and the sampler of that step waits for the masks; with speculative drafts it
fills every draft position of every sequence one after another at any batch size. With
``EXTRACTOR_MASK_THREADS`` set to N > 0, the masks of a step whose grammars are all llguidance's go
to llguidance's Rust thread pool of N threads in one call
(``fill_next_token_bitmask_par_with_draft_tokens``: a row per draft position and one after them),
at any batch size. Other backends, drafts padded by async scheduling or holding the stop token,
and vLLM releases without the hook keep vLLM's own fill.

On an H200 (7B-class model, 16 host cores) the pool of 16 took P5 (constrained output tok/s against
free text of the same length) from 0.40 to 0.71 for the task schema and from 0.34 to 0.42 for the
substring grammar one task at a time, 0.36 -> 0.50 and 0.28 -> 0.37 with every task mixed 256 at
once (``bench/results/mask_fill.md``), and ``extractor batch`` 1.20x (grounded) and 1.86x (grounding
off), with latency at 1 and 16 clients as without it. The in-process engine turns it on on CUDA
(``extractor.engines.vllm.cuda_environment``) unless the setting says otherwise; ``vllm serve`` gets
it where the variable is set in its environment. On the CPU backend the model's own threads hold the
cores: off there.

vLLM runs :func:`extractor.vllm_plugins.register` in every process that runs an engine, its engine
core included (spawned on CUDA: a patch made in the parent would not reach it); unset or 0,
:func:`install` changes nothing, so installing extractor beside some other vLLM application leaves
that one as it was.
"""

from __future__ import annotations

import os
from typing import Any

from extractor.engines.vllm import MASK_THREADS as ENV


def threads() -> int:
    """N from ``EXTRACTOR_MASK_THREADS`` (0: vLLM's own fill), as vLLM's processes see it."""
    raw = os.environ.get(ENV, "").strip() or "0"
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{ENV}: {raw!r} is not a whole number of threads (0 leaves vLLM's own mask fill)") from None
    if value < 0:
        raise ValueError(f"{ENV}: {value} threads; give 0 (vLLM's own mask fill) or more")
    return value


def constrained(manager: Any, request: Any) -> bool:
    """Whether this step's token is under the grammar (not inside a reasoning section), as vLLM decides it."""
    if hasattr(manager, "should_fill_bitmask"):  # vLLM 0.26
        return bool(manager.should_fill_bitmask(request))
    return bool(manager._get_constraint_bounds(request, ()).constraint_start == 0)  # 0.32


def install() -> tuple[bool, str]:
    """Route mask fills through llguidance's pool when asked to; idempotent. (patched, what was done or why not)."""
    count = threads()
    if count == 0:
        return False, f"{ENV} unset or 0"
    try:
        import llguidance
        import llguidance.torch as llguidance_torch
        from vllm.v1.structured_output import StructuredOutputManager
        from vllm.v1.structured_output.backend_guidance import GuidanceGrammar
    except ImportError as error:  # another vLLM layout: its own fill stays
        return False, f"vLLM's structured-output manager not found ({error})"
    done = f"token masks filled by llguidance's pool of {count} threads"
    original = StructuredOutputManager.grammar_bitmask
    if getattr(original, "__extractor_masks__", False):
        return True, done
    pool = llguidance.LLExecutor(count)

    def grammar_bitmask(
        self: Any, requests: dict[str, Any], request_ids: list[str], spec_tokens: dict[str, list[int]]
    ) -> Any:
        if not request_ids or self.vllm_config.model_config.is_diffusion:
            return original(self, requests, request_ids, spec_tokens)
        grammars = [requests[i].structured_output_request.grammar for i in request_ids]
        if not all(isinstance(g, GuidanceGrammar) for g in grammars):
            return original(self, requests, request_ids, spec_tokens)
        drafts = [list(spec_tokens.get(i, ())) for i in request_ids]
        if any(-1 in d or g.ll_tokenizer.eos_token in d for d, g in zip(drafts, grammars, strict=True)):
            return original(self, requests, request_ids, spec_tokens)  # async padding, or a stop among drafts
        if self._grammar_bitmask is None:
            rows = self.vllm_config.scheduler_config.max_num_seqs * (1 + self.vllm_config.num_speculative_tokens)
            self._grammar_bitmask = self.backend.allocate_token_bitmask(rows)
        bitmask = self._grammar_bitmask
        matchers, drafted = [], []  # llguidance's draft call refuses an empty draft
        row = 0
        for request_id, grammar, draft in zip(request_ids, grammars, drafts, strict=True):
            if not constrained(self, requests[request_id]) or grammar.is_terminated():
                bitmask[row : row + len(draft) + 1].fill_(self._full_mask)
            elif draft:
                drafted.append((grammar.ll_matcher, row, draft))
            else:
                matchers.append((grammar.ll_matcher, row))
            row += len(draft) + 1
        if matchers:
            llguidance_torch.fill_next_token_bitmask_par(pool, matchers, bitmask)
        if drafted:
            # one row per draft position and one for the token after them; the matchers end where they began
            llguidance_torch.fill_next_token_bitmask_par_with_draft_tokens(pool, drafted, bitmask)
        if matchers or drafted:
            for grammar in grammars:
                grammar.check_error()
        return bitmask[:row].numpy()

    grammar_bitmask.__extractor_masks__ = True  # type: ignore[attr-defined]
    StructuredOutputManager.grammar_bitmask = grammar_bitmask  # type: ignore[method-assign,assignment]
    return True, done
