"""The grammar bitmask and its row mapping staged through pinned host buffers kept across steps: a vLLM general plugin.

vLLM 0.26 and 0.32 copy each constrained step's token masks to the GPU from pinned host memory
allocated in that step: the V2 model runner's ``StructuredOutputsWorker.apply_grammar_bitmask``
(``vllm/v1/worker/gpu/structured_outputs.py``) pins the bitmask it is given (0.26's
``async_copy_to_gpu`` calls ``pin_memory()``, 0.32's ``async_tensor_h2d`` copies into a fresh pinned
tensor) and builds the bitmask -> logits mapping with ``torch.tensor(..., pin_memory=True)``. Pinned
allocations go through one lock in torch's host allocator and, past its cache, the driver, on the
engine core's main thread while the GPU waits for the step. vLLM issue 49013 bisected a ~2x
structured-output slowdown (0.23 -> 0.24) to this staging (pull request 45424); the fixes proposed
there (49150, 49168, 49780) were closed unmerged.

With ``EXTRACTOR_MASK_STAGING=1`` each worker keeps two pinned host buffers, one for the bitmask rows
and one for the mapping, allocated at the first constrained step's size and grown (doubled, at
least to the step's size) when a later step holds more rows. Each step waits for the previous
step's copies out of them (an event recorded on the worker's copy stream after its kernel, long
done by then: the next step's masks need the tokens that kernel masked), copies the masks in and
hands vLLM's own ``apply_grammar_bitmask`` a view of the pinned rows, which it copies without
staging. The mapping's one pinned ``torch.tensor`` is answered from the second buffer: the module
sees a ``torch`` whose every other name is torch's own. vLLM's function runs as written otherwise,
so masks and answers are the same (``tests/test_vllm_staging.py``: real masks of the shipped tasks
applied both ways on CPU; the GPU run compares answers' digests).

The V1 model runner (``VLLM_USE_V2_MODEL_RUNNER=0``), CPU logits and a vLLM without the V2 worker
keep vLLM's own staging. Measured on an H200 (2026-12-05, ``bench/results/mask_levers.md``): constrained
output 0.79-0.84x of vLLM's own staging one task at a time, and the grounded answers' digest differed
from the three other runs' (unexplained): **off** by default, not to be turned on until that is understood. vLLM
loads the entry point ``vllm.general_plugins: extractor_staging`` (``pyproject.toml``) in every
process that runs an engine; unset or 0, ``register`` changes nothing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from extractor.engines import vllm_ahead

log = logging.getLogger("vllm.extractor_masks")

ENV = "EXTRACTOR_MASK_STAGING"
_here = threading.local()  # .staging: the Staging of the apply_grammar_bitmask running on this thread


def wanted() -> bool:
    """``EXTRACTOR_MASK_STAGING``: 1 stages masks through kept pinned buffers, 0 or unset leaves vLLM's way."""
    return vllm_ahead.switch(ENV, "the masks staged through kept pinned buffers")


class Staging:
    """One worker's pinned host buffers for the bitmask rows and the mapping, reused every step, grown with the batch.

    Args:
        allocate: ``(shape, dtype) -> tensor`` on the host; pinned on CUDA, plain in tests.
        fence: a new event (``record(stream)``, ``synchronize()``); ``torch.cuda.Event`` on CUDA.

    """

    def __init__(self, *, allocate: Callable[[tuple[int, ...], Any], Any], fence: Callable[[], Any]) -> None:
        self._allocate = allocate
        self._new_fence = fence
        self._fence: Any = None
        self._rows: Any = None
        self._mapping: Any = None
        self.grown = 0  # allocations after the first of each buffer (the tests read it)

    def _room(self, buffer: Any, shape: tuple[int, ...], dtype: Any) -> Any:
        if buffer is not None and buffer.shape[0] >= shape[0] and tuple(buffer.shape[1:]) == shape[1:]:
            return buffer
        if buffer is not None:
            self.grown += 1
        size = shape[0] if buffer is None else max(shape[0], 2 * buffer.shape[0])
        return self._allocate((size, *shape[1:]), dtype)

    def wait(self) -> None:
        """Block until the last step's copies out of the buffers are done: they may be overwritten then."""
        if self._fence is not None:
            self._fence.synchronize()
            self._fence = None

    def rows(self, masks: Any, dtype: Any) -> Any:
        """``masks`` (rows x words, numpy or a host tensor) copied into the kept buffer; the view of them there."""
        import torch

        source = torch.from_numpy(masks) if isinstance(masks, np.ndarray) else masks
        self._rows = self._room(self._rows, tuple(source.shape), dtype)
        view = self._rows[: source.shape[0]]
        view.copy_(source)
        return view

    def mapping(self, values: list[int], dtype: Any) -> Any:
        """The bitmask -> logits mapping written into the kept buffer; the view of it there."""
        self._mapping = self._room(self._mapping, (len(values),), dtype)
        view = self._mapping[: len(values)]
        view.numpy()[:] = values
        return view

    def done(self, stream: Any) -> None:
        """Mark this step's copies: an event on ``stream`` after everything queued on it (the kernel included)."""
        self._fence = self._new_fence()
        self._fence.record(stream)


class TorchHere:
    """What vLLM's worker module sees as ``torch``: torch itself, but the mapping's pinned copy comes from the buffer.

    Only a ``tensor(list, dtype=..., device="cpu", pin_memory=True)`` made inside a staged
    ``apply_grammar_bitmask`` (on that thread) is answered from :class:`Staging`; anything else is torch's.
    """

    def __init__(self, torch: Any) -> None:
        self._torch = torch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._torch, name)

    def tensor(self, data: Any, *args: Any, **kwargs: Any) -> Any:
        staging: Staging | None = getattr(_here, "staging", None)
        if (
            staging is not None
            and not args
            and isinstance(data, list)
            and kwargs.get("pin_memory")
            and str(kwargs.get("device")) == "cpu"
            and set(kwargs) <= {"dtype", "device", "pin_memory"}
        ):
            return staging.mapping(data, kwargs.get("dtype") or self._torch.int64)
        return self._torch.tensor(data, *args, **kwargs)


def pinned(shape: tuple[int, ...], dtype: Any) -> Any:
    """A pinned host tensor (CUDA's page-locked memory: copied to the GPU without another staging)."""
    import torch

    return torch.empty(shape, dtype=dtype, pin_memory=True)


def cuda_fence() -> Any:
    """A CUDA event: recorded after a step's copies, waited on before the next step overwrites their source."""
    import torch

    return torch.cuda.Event()  # type: ignore[no-untyped-call]


def install(
    worker: Any,
    module: Any,
    *,
    allocate: Callable[[tuple[int, ...], Any], Any] = pinned,
    fence: Callable[[], Any] = cuda_fence,
    device: str = "cuda",
) -> bool:
    """Wrap ``worker.apply_grammar_bitmask`` (vLLM's V2 ``StructuredOutputsWorker``); False if already done.

    ``module`` (the worker's) gets a :class:`TorchHere`. Logits on another ``device`` keep vLLM's way;
    the tests pass ``"cpu"`` with host allocations and events of their own.
    """
    original = worker.apply_grammar_bitmask
    if getattr(original, "__extractor_staging__", False):
        return False

    def apply_grammar_bitmask(
        self: Any,
        logits: Any,
        input_batch: Any,  # vLLM's names: it may pass them by keyword
        grammar_req_ids: list[str],
        grammar_bitmask: Any,
        *rest: Any,
        **named: Any,
    ) -> Any:
        if not grammar_req_ids or logits.device.type != device:
            return original(self, logits, input_batch, grammar_req_ids, grammar_bitmask, *rest, **named)
        staging = self.__dict__.get("_extractor_staging")
        if staging is None:
            staging = self._extractor_staging = Staging(allocate=allocate, fence=fence)
        staging.wait()
        rows = staging.rows(grammar_bitmask, self.grammar_bitmask.dtype)
        _here.staging = staging
        try:
            return original(self, logits, input_batch, grammar_req_ids, rows, *rest, **named)
        finally:
            _here.staging = None
            staging.done(self.copy_stream)

    apply_grammar_bitmask.__extractor_staging__ = True  # type: ignore[attr-defined]
    worker.apply_grammar_bitmask = apply_grammar_bitmask
    if not isinstance(module.torch, TorchHere):
        module.torch = TorchHere(module.torch)
    return True


def register() -> None:
    """The plugin hook vLLM calls: stage the V2 runner's masks through kept pinned buffers when asked to; idempotent."""
    if not wanted():
        return
    try:
        from vllm.v1.worker.gpu import structured_outputs
    except ImportError as error:  # another vLLM layout: its own staging stays
        log.warning("%s=1: vLLM's V2 structured-output worker not found (%s); masks staged by vLLM", ENV, error)
        return
    worker = getattr(structured_outputs, "StructuredOutputsWorker", None)
    if worker is None or not hasattr(worker, "apply_grammar_bitmask") or not hasattr(structured_outputs, "torch"):
        log.warning("%s=1: this vLLM's StructuredOutputsWorker differs; masks staged by vLLM", ENV)
        return
    if install(worker, structured_outputs):
        log.info("%s=1: grammar bitmasks and their mapping staged through kept pinned buffers (V2 runner)", ENV)
