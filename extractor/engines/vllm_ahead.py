"""The next step's token masks filled while vLLM's scheduler works through this step's outputs: part of the mask plugin.

On an H200 vLLM's engine core's main thread is busy almost the whole time, constrained or not
(py-spy, ``bench/results/mask_fill.md``), and the GPU waits on it. Each step that thread advances
every structured sequence's grammar by its new token, one request after another, inside
``Scheduler.update_from_output`` (``GuidanceGrammar.accept_tokens``), goes on through the rest of
that function for every request (stop checks, outputs), and only then fills the next step's masks
(with ``EXTRACTOR_MASK_THREADS``: llguidance's pool, the main thread waiting). Together the advance
and the masks were a quarter of that thread's samples in a schema pass (``accept_tokens`` 37 and
``grammar_bitmask`` 57 of 398).

With ``EXTRACTOR_MASK_AHEAD=1`` (and the pool on), when ``update_from_output`` starts, each live
llguidance grammar whose request got exactly one token this step (not the stop token) is handed,
with that token, to one job on a thread of its own: llguidance's pool advances them all in one call
(``consume_token_par``) and fills their next masks into a buffer of its own, both without the GIL,
while the main thread goes through ``update_from_output`` as vLLM wrote it. vLLM's own
``accept_tokens`` for such a grammar, with that very token, then has nothing left to do; any other
call for it (other tokens) first waits for the job and takes the early token back, and a grammar
whose request vLLM did not advance is rolled back too. The next ``grammar_bitmask`` waits for the
job and copies those rows; every other row is filled as before. Masks and answers are the same as
without it (``tests/test_vllm_ahead.py``: step by step, and a real engine). On 2 cores the thread's
grammar work went from 3.8 to 1.3 ms a step (schema) and from 5.0 to 1.2 ms (substring grammar),
63 requests at once (``bench/results/mask_ahead.md``).

One difference: a token the grammar rejects (which its own mask never lets through) is found after
vLLM's loop, not in it. vLLM would end that request with an error in this step; here the rejection is
logged, the grammar is left in llguidance's error state, and its next mask holds only the stop
token, so the request stops at its next token and the pipeline's validation sees the text.

Off with speculative drafts (several tokens a step, checked against the grammar before the masks).
Measured on an H200 (2026-12-05, ``bench/results/mask_levers.md``): constrained output 0.55-0.57x of the
pool alone one task at a time, the same answers: **off** by default.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

log = logging.getLogger("vllm.extractor_masks")

ENV = "EXTRACTOR_MASK_AHEAD"
_jobs: ThreadPoolExecutor | None = None
_jobs_lock = threading.Lock()
_current = threading.local()  # .ahead: the job of the update_from_output running on this thread


def switch(name: str, meaning: str) -> bool:
    """A lever's variable read in vLLM's engine core: ``1`` (``meaning``) or ``0``/unset; anything else names both."""
    raw = os.environ.get(name, "").strip() or "0"
    if raw not in ("0", "1"):
        raise ValueError(f"{name}: {raw!r}; give 1 ({meaning}) or 0")
    return raw == "1"


def wanted() -> bool:
    """``EXTRACTOR_MASK_AHEAD``: 1 fills the next masks ahead (with the pool), 0 or unset not."""
    return switch(ENV, "the next step's masks filled ahead, with the pool")


def _worker() -> ThreadPoolExecutor:
    global _jobs
    with _jobs_lock:
        if _jobs is None:
            _jobs = ThreadPoolExecutor(1, thread_name_prefix="extractor-masks-ahead")
        return _jobs


@dataclasses.dataclass
class Ahead:
    """One step's early work: (request id, grammar, token) each, and the job advancing them and filling their rows."""

    picked: list[tuple[str, Any, int]]
    job: Future[list[bool]]
    buffer: Any
    index: dict[int, int]  # id(grammar) -> its place in picked (its row of buffer)
    confirmed: set[int] = dataclasses.field(default_factory=set)  # vLLM advanced it by that very token
    stale: set[int] = dataclasses.field(default_factory=set)  # taken back (vLLM advanced it otherwise): no row

    def rows(self) -> dict[str, int]:
        """Request id -> the row of ``buffer`` that holds its next mask."""
        return {request_id: n for n, (request_id, _, _) in enumerate(self.picked) if n not in self.stale}

    def settle(self) -> None:
        """Wait for the job; take back what vLLM did not confirm, name what the grammar rejected. Main thread.

        Once, by :func:`take`, which forgets the step's work as it settles it.
        """
        accepted = self.job.result()
        for n, (request_id, grammar, token) in enumerate(self.picked):
            if n in self.stale:  # taken back already, and advanced by vLLM's own accept since
                continue
            if not accepted[n]:
                grammar.check_error()
                log.warning("grammar rejected token %d of request %s: it stops at its next token", token, request_id)
            elif n not in self.confirmed:
                grammar.ll_matcher.rollback(1)
                self.stale.add(n)


def start(
    manager: Any,
    scheduler: Any,
    scheduler_output: Any,
    model_output: Any,
    pool: Any,
    grammar_class: Any,
    constrained: Callable[[Any, Any], bool],
) -> Ahead | None:
    """Pick this step's single-token grammars and start their job; None where there is nothing to do ahead.

    ``constrained(manager, request)``: whether the request's next token is under its grammar.
    """
    from llguidance.torch import fill_next_token_bitmask_par

    if manager.vllm_config.num_speculative_tokens or manager.vllm_config.model_config.is_diffusion:
        return None
    sampled, index = model_output.sampled_token_ids, model_output.req_id_to_index
    if not sampled:
        return None
    picked: list[tuple[str, Any, int]] = []
    for request_id in scheduler_output.num_scheduled_tokens:
        request = scheduler.requests.get(request_id)
        if request is None or request.is_finished() or not request.use_structured_output:
            continue
        grammar = request.structured_output_request.grammar
        place = index.get(request_id)
        if not isinstance(grammar, grammar_class) or grammar.is_terminated() or place is None:
            continue
        tokens = sampled[place]
        if len(tokens) != 1 or tokens[0] == grammar.ll_tokenizer.eos_token or grammar.ll_matcher.is_stopped():
            continue
        if constrained(manager, request):
            picked.append((request_id, grammar, int(tokens[0])))
    if not picked:
        return None
    if getattr(manager, "_extractor_ahead_buffer", None) is None:
        manager._extractor_ahead_buffer = manager.backend.allocate_token_bitmask(
            manager.vllm_config.scheduler_config.max_num_seqs
        )
    buffer = manager._extractor_ahead_buffer
    matchers = [(grammar.ll_matcher, token) for _, grammar, token in picked]

    def job() -> list[bool]:
        accepted: list[bool] = pool.consume_token_par(matchers)
        fill_next_token_bitmask_par(pool, [(m, row) for row, (m, _) in enumerate(matchers)], buffer)
        return accepted

    index_of = {id(grammar): n for n, (_, grammar, _) in enumerate(picked)}
    return Ahead(picked, _worker().submit(job), buffer, index_of)


def take(manager: Any) -> Ahead | None:
    """The early work for this manager's next masks, settled (its job done), and forgotten; None if none."""
    ahead: Ahead | None = getattr(manager, "_extractor_ahead", None)
    if ahead is not None:
        manager._extractor_ahead = None
        ahead.settle()
    return ahead


def install(pool: Any, scheduler_class: Any, grammar_class: Any, constrained: Callable[[Any, Any], bool]) -> bool:
    """Patch ``update_from_output`` and the guidance grammar's ``accept_tokens``; False if already done."""
    original_accept = grammar_class.accept_tokens
    if getattr(original_accept, "__extractor_ahead__", False):
        return False
    original_update = scheduler_class.update_from_output
    broken: list[bool] = []  # set once start() failed: never tried again

    def accept_tokens(self: Any, request_id: str, tokens: list[int]) -> bool:
        ahead: Ahead | None = getattr(_current, "ahead", None)
        n = None if ahead is None else ahead.index.get(id(self))
        if ahead is None or n is None:
            return bool(original_accept(self, request_id, tokens))
        del ahead.index[id(self)]
        if len(tokens) == 1 and tokens[0] == ahead.picked[n][2]:
            ahead.confirmed.add(n)  # advanced already; a rejection is named when the job is settled
            return True
        if ahead.job.result()[n]:  # other tokens: the early one back first (rare)
            self.ll_matcher.rollback(1)
        ahead.stale.add(n)
        return bool(original_accept(self, request_id, tokens))

    def update_from_output(self: Any, scheduler_output: Any, model_output: Any, *args: Any, **kwargs: Any) -> Any:
        manager = self.structured_output_manager
        take(manager)  # an earlier step's work no masks were asked for: settled before anything moves
        ahead = None
        if not broken:
            try:
                ahead = start(manager, self, scheduler_output, model_output, pool, grammar_class, constrained)
            except Exception:  # another vLLM's objects: its own way from now on, as without the plugin
                broken.append(True)
                log.warning("%s: this vLLM's step outputs are not as expected; masks filled after each step", ENV)
                log.debug("the step's early work failed", exc_info=True)
        _current.ahead = ahead
        try:
            return original_update(self, scheduler_output, model_output, *args, **kwargs)
        finally:
            _current.ahead = None
            manager._extractor_ahead = ahead

    accept_tokens.__extractor_ahead__ = True  # type: ignore[attr-defined]
    grammar_class.accept_tokens = accept_tokens
    scheduler_class.update_from_output = update_from_output
    return True
