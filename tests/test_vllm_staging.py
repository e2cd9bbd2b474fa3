"""Masks staged through kept pinned buffers (``vllm_staging``): vLLM's own ``apply_grammar_bitmask``, the same logits.

vLLM's V2 ``StructuredOutputsWorker.apply_grammar_bitmask`` runs here on CPU tensors: the CUDA
streams are stand-ins that do nothing, and its Triton kernel a NumPy version of what the kernel does
(each mask row to the logits row the mapping names, a cleared bit sets the logit to -inf). The masks
are real: the shipped tasks' grammars on the default model's tokenizer, part-way through real answers.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from extractor import Catalog
from extractor.engines import vllm_staging

from .test_vllm_masks import batch, vllm_fill

torch = pytest.importorskip("torch")
pytest.importorskip("llguidance")
worker_module = pytest.importorskip("vllm.v1.worker.gpu.structured_outputs")


class Stream:
    """A CUDA stream that orders nothing: on CPU every copy is done when it returns."""

    def wait_stream(self, other: Any) -> None:
        pass


class Fence:
    """An event that logs what is done with it."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def record(self, stream: Any) -> None:
        self.log.append("record")

    def synchronize(self) -> None:
        self.log.append("wait")


def kernel(
    logits: Any,
    logits_stride: int,
    logits_indices: Any,
    cu_num_logits: Any,
    bitmask: Any,
    bitmask_stride: int,
    vocab_size: int,
    *,
    MASK_STRIDE: int,  # noqa: N803 - the kernel's own names
    BLOCK_SIZE: int,  # noqa: N803
) -> None:
    """vLLM 0.32's ``_apply_grammar_bitmask_kernel`` on the host: row i masks logits row cu[req] + position."""
    cu = cu_num_logits.tolist()
    for i, entry in enumerate(logits_indices[: bitmask.shape[0]].tolist()):
        request, position = divmod(entry, MASK_STRIDE)
        if position < cu[request + 1] - cu[request]:
            words = bitmask[i].numpy().view(np.uint8)
            allowed = np.unpackbits(words, bitorder="little")[:vocab_size].astype(bool)
            logits[cu[request] + position, :vocab_size][torch.from_numpy(~allowed)] = -float("inf")


@pytest.fixture
def on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's worker module as it is, its CUDA streams and kernel made to run on CPU tensors; restored after."""
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", Stream)
    monkeypatch.setattr(worker_module, "_apply_grammar_bitmask_kernel", Launch())
    monkeypatch.setattr(worker_module, "torch", worker_module.torch)  # install() swaps it: put back after


class Launch:
    """``kernel[grid](...)``: any grid runs the host version."""

    def __getitem__(self, grid: Any) -> Any:
        return kernel


def worker_class() -> Any:
    class Worker(worker_module.StructuredOutputsWorker):  # type: ignore[misc,name-defined]
        pass

    return Worker


def worker(kind: Any, rows: int, words: int) -> Any:
    """What ``apply_grammar_bitmask`` reads of a worker: its device buffers (here on CPU) and copy stream."""
    ours = object.__new__(kind)
    ours.logits_indices = torch.zeros(rows, dtype=torch.int32)
    ours.grammar_bitmask = torch.zeros((rows, words), dtype=torch.int32)
    ours.device = torch.device("cpu")
    ours.copy_stream = Stream()
    ours.mask_stride = 1
    ours.num_bonus_tokens = 1
    return ours


def step(grammar_ids: list[str], free: int) -> Any:
    """A batch holding ``grammar_ids`` and ``free`` unconstrained requests, in another order than the masks."""
    ids = [f"free-{i}" for i in range(free)] + grammar_ids
    ids = ids[1::2] + ids[::2]
    return SimpleNamespace(
        req_ids=ids,
        cu_num_logits_np=np.arange(len(ids) + 1, dtype=np.int32),
        cu_num_logits=torch.arange(len(ids) + 1, dtype=torch.int32),
        num_draft_tokens_per_req=None,
    )


def apply(ours: Any, masks: np.ndarray, grammar_ids: list[str], free: int, vocab: int) -> Any:
    logits = torch.randn(len(grammar_ids) + free, vocab, generator=torch.Generator().manual_seed(len(grammar_ids)))
    ours.apply_grammar_bitmask(logits, step(grammar_ids, free), grammar_ids, masks)
    return logits


def test_kept_buffers_give_the_logits_vllms_own_staging_gives(
    catalog: Catalog, tokenizers: tuple[Any, Any], on_cpu: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, lt = tokenizers
    requests, ids = batch(catalog, tokenizers, copies=5)
    masks = vllm_fill(lt, requests, ids)
    vocab, words = lt.vocab_size, masks.shape[1]
    plain = worker(worker_module.StructuredOutputsWorker, 64, words)
    expected = [apply(plain, masks[:n], ids[:n], free, vocab) for n, free in ((10, 3), (4, 0), (15, 5))]
    assert all(torch.isinf(logits).any() for logits in expected)  # the masks bite

    monkeypatch.setattr(worker_module, "PIN_MEMORY", True)  # as on CUDA: vLLM asks for pinned memory
    made: list[tuple[int, ...]] = []
    fences: list[str] = []

    def allocate(shape: tuple[int, ...], dtype: Any) -> Any:
        made.append(shape)
        return torch.empty(shape, dtype=dtype)

    kind = worker_class()
    assert vllm_staging.install(kind, worker_module, allocate=allocate, fence=lambda: Fence(fences), device="cpu")
    assert not vllm_staging.install(kind, worker_module, allocate=allocate, fence=lambda: Fence(fences), device="cpu")
    staged = worker(kind, 64, words)
    first = apply(staged, masks[:10], ids[:10], 3, vocab)
    assert torch.equal(first, expected[0])
    assert made == [(10, words), (10,)]  # the rows and the mapping, at the first step's size
    buffers = staged._extractor_staging._rows.data_ptr(), staged._extractor_staging._mapping.data_ptr()
    assert torch.equal(apply(staged, masks[:4], ids[:4], 0, vocab), expected[1])
    assert (staged._extractor_staging._rows.data_ptr(), staged._extractor_staging._mapping.data_ptr()) == buffers
    assert len(made) == 2  # a smaller step: the same buffers
    assert torch.equal(apply(staged, masks[:15], ids[:15], 5, vocab), expected[2])
    assert made[2:] == [(20, words), (20,)]  # a larger one: grown, doubled
    assert staged._extractor_staging.grown == 2
    # each step waits for the last one's copies before writing into the buffers, then marks its own
    assert fences == ["record", "wait", "record", "wait", "record"]
    assert not torch.isinf(first[[step(ids[:10], 3).req_ids.index(f"free-{i}") for i in range(3)]]).any()


def test_torch_here_is_torch_outside_a_staged_call() -> None:
    here = vllm_staging.TorchHere(torch)
    assert here.int32 is torch.int32 and here.zeros is torch.zeros
    made = here.tensor([1, 2, 3], dtype=torch.int32, device="cpu")
    assert made.tolist() == [1, 2, 3]
    staging = vllm_staging.Staging(allocate=lambda shape, dtype: torch.empty(shape, dtype=dtype), fence=object)
    vllm_staging._here.staging = staging
    try:
        assert here.tensor([4, 5], dtype=torch.int32, device="cpu").tolist() == [4, 5]  # not pinned: torch's
        kept = here.tensor([4, 5], dtype=torch.int32, device="cpu", pin_memory=True)
        assert kept.data_ptr() == staging._mapping.data_ptr() and kept.tolist() == [4, 5]
    finally:
        vllm_staging._here.staging = None


def test_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(vllm_staging.ENV, raising=False)
    assert not vllm_staging.wanted()
    monkeypatch.setenv(vllm_staging.ENV, "1")
    assert vllm_staging.wanted()
    monkeypatch.setenv(vllm_staging.ENV, "yes")
    with pytest.raises(ValueError, match="EXTRACTOR_MASK_STAGING: 'yes'; give 1"):
        vllm_staging.wanted()


def test_register_wraps_vllms_worker_once_and_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    kind = worker_module.StructuredOutputsWorker
    original = kind.apply_grammar_bitmask
    monkeypatch.setattr(kind, "apply_grammar_bitmask", original)
    monkeypatch.setattr(worker_module, "torch", worker_module.torch)
    monkeypatch.delenv(vllm_staging.ENV, raising=False)
    vllm_staging.register()
    assert kind.apply_grammar_bitmask is original and worker_module.torch is torch
    monkeypatch.setenv(vllm_staging.ENV, "1")
    vllm_staging.register()
    wrapped = kind.apply_grammar_bitmask
    vllm_staging.register()
    assert kind.apply_grammar_bitmask is wrapped is not original
    assert isinstance(worker_module.torch, vllm_staging.TorchHere)
