"""LoRA training of a task adapter with transformers + peft: answer-only loss, seeded, resumable.

Plain LoRA (``bias="none"``, no DoRA, no ``modules_to_save``): what vLLM's multi-LoRA serves.
Dropout 0 and bf16 autocast where the device computes bf16 natively (1.8x the examples/s of fp32
with dropout 0.05 on the CPU it was measured on; fp32 on a CPU without bf16 instructions);
on a CUDA device when one is present.
The chat of each sample is rendered with the model's own chat template, as the engines render
a request; the loss covers the answer and the end-of-turn token only. A checkpoint (adapter,
optimizer, step) is written every ``save_every`` steps into ``<out>/checkpoint``; ``resume``
goes on from it with the same data order.
"""

from __future__ import annotations

import json
import math
import random
import resource
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from extractor.engines.tokenizer import load_tokenizer, render_chat
from extractor.errors import ExtractorError
from extractor.training.data import Sample

TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class TrainingError(ExtractorError):
    """Training cannot start or go on (no samples, no peft, a checkpoint from another run)."""


@dataclass(frozen=True)
class TrainConfig:
    """How to train: LoRA rank and alpha, epochs, optimizer, batch, seed, checkpoints."""

    epochs: float = 2.0
    rank: int = 8
    alpha: int = 16
    learning_rate: float = 2e-4
    batch_size: int = 8
    max_length: int = 512
    seed: int = 0
    save_every: int = 50
    bf16: bool = True


@dataclass
class TrainReport:
    """What a training run did: steps, examples, seconds, losses, peak memory."""

    steps: int = 0
    examples: int = 0
    seconds: float = 0.0
    train_loss: float | None = None
    first_loss: float | None = None
    val_loss: float | None = None
    peak_rss_mib: float = 0.0
    peak_gpu_mib: float = 0.0
    device: str = "cpu"
    resumed_from: int = 0
    # Steps planned; fewer were run when the deadline came first (``steps`` < ``planned``).
    planned: int = 0
    losses: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["examples_per_s"] = self.examples / self.seconds if self.seconds else None
        out.pop("losses")
        return out


def encode(tokenizer: Any, sample: Sample, max_length: int) -> tuple[list[int], list[int]]:
    """Token ids of prompt + answer + end of turn, and labels masking the prompt (-100)."""
    prompt = render_chat(tokenizer, sample.messages)
    end = tokenizer.eos_token or ""
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    answer_ids = tokenizer(sample.answer + end, add_special_tokens=False)["input_ids"]
    ids = (prompt_ids + answer_ids)[-max_length:]
    labels = ([-100] * len(prompt_ids) + answer_ids)[-max_length:]
    return ids, labels


def train(
    model_dir: Path,
    train_set: Sequence[Sample],
    held_out: Sequence[Sample],
    out: Path,
    config: TrainConfig,
    *,
    resume: bool = False,
    progress: Callable[[str], None] | None = None,
    deadline: float | None = None,
) -> TrainReport:
    """Train a LoRA adapter on ``train_set``; the adapter (peft format) is saved in ``out``.

    ``deadline`` (``time.perf_counter()``): no step starts after it (the first always runs); the
    adapter is saved as trained so far and the report's ``steps`` fall short of its ``planned``.
    """
    if not train_set:
        raise TrainingError("no training samples: every pool line was refused (see the report above)")
    try:
        import peft
        import torch
        from transformers import AutoModelForCausalLM
    except ImportError as error:
        raise TrainingError(f"training needs torch, transformers and peft: {error}") from None

    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    torch.manual_seed(config.seed)  # the LoRA weights' initialisation; the data order has its own RNG
    tokenizer = load_tokenizer(model_dir)
    model: Any = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.to(_device(torch))
    lora = peft.LoraConfig(
        r=config.rank,
        lora_alpha=config.alpha,
        lora_dropout=0.0,
        bias="none",
        target_modules=list(TARGET_MODULES),
        task_type="CAUSAL_LM",
    )
    model = peft.get_peft_model(model, lora)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.learning_rate)
    encoded = [encode(tokenizer, s, config.max_length) for s in train_set]
    batches_per_epoch = math.ceil(len(encoded) / config.batch_size)
    total_steps = max(1, round(batches_per_epoch * config.epochs))
    order = _order(len(encoded), total_steps, config)
    report = TrainReport(planned=total_steps)
    checkpoint = out / "checkpoint"
    if resume and (checkpoint / "state.json").is_file():
        report.resumed_from = _load_checkpoint(model, optimizer, checkpoint, config, len(encoded))
        say(f"train: resuming at step {report.resumed_from} of {total_steps}")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    started = time.perf_counter()
    model.train()
    for step in range(report.resumed_from, total_steps):
        if deadline is not None and step > report.resumed_from and time.perf_counter() > deadline:
            say(f"train: the time is spent: stopped after step {step} of {total_steps}")
            break
        batch = [encoded[i] for i in order[step]]
        loss = _step(model, batch, pad, config.bf16)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        value = float(loss.detach())
        report.losses.append(value)
        if report.first_loss is None:
            report.first_loss = value
        report.steps, report.examples = step + 1, report.examples + len(batch)
        if (step + 1) % 10 == 0 or step + 1 == total_steps:
            elapsed = time.perf_counter() - started
            recent = report.losses[-10:]
            say(
                f"train: step {step + 1}/{total_steps}  loss {sum(recent) / len(recent):.4f}  "
                f"{report.examples / elapsed:.2f} examples/s"
            )
        if config.save_every and (step + 1) % config.save_every == 0 and step + 1 < total_steps:
            _save_checkpoint(model, optimizer, checkpoint, step + 1, config, len(encoded))
    report.seconds = time.perf_counter() - started
    recent = report.losses[-max(1, min(20, len(report.losses))) :]
    report.train_loss = sum(recent) / len(recent) if recent else None
    report.val_loss = _evaluate(model, [encode(tokenizer, s, config.max_length) for s in held_out], pad, config)
    report.peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    device = next(model.parameters()).device
    report.device = "cpu" if device.type == "cpu" else f"{torch.cuda.get_device_name(device)} ({device})"
    if device.type == "cuda":
        report.peak_gpu_mib = torch.cuda.max_memory_allocated() / 2**20
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    if next(model.parameters()).device.type == "cuda":  # leave the GPU to the engine that serves it
        del model, optimizer
        torch.cuda.empty_cache()
    return report


def _order(n: int, total_steps: int, config: TrainConfig) -> list[list[int]]:
    """Every step's sample indices: one seeded shuffle per epoch, cut into batches."""
    rng = random.Random(config.seed)
    steps: list[list[int]] = []
    while len(steps) < total_steps:
        epoch = list(range(n))
        rng.shuffle(epoch)
        steps += [epoch[i : i + config.batch_size] for i in range(0, n, config.batch_size)]
    return steps[:total_steps]


def _device(torch: Any) -> Any:
    """CUDA where a GPU answers (``CUDA_VISIBLE_DEVICES=""`` keeps training on the CPU), else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _step(model: Any, batch: Sequence[tuple[list[int], list[int]]], pad: int, bf16: bool) -> Any:
    import torch

    device = next(model.parameters()).device
    width = max(len(ids) for ids, _ in batch)
    input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in batch], device=device)
    labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in batch], device=device)
    mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in batch], device=device)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16 and bf16_pays(torch, device.type)):
        return model(input_ids=input_ids, attention_mask=mask, labels=labels).loss


def bf16_pays(torch: Any, device: str) -> bool:
    """Whether bf16 autocast is fast here: a GPU, or a CPU with bf16 instructions (AVX512-BF16, AMX).

    Without them torch falls back to a reference GEMM: on an AVX2-only EPYC a 512x576x1536 bf16
    matmul took 935 ms against 34 ms in fp32, and the test suite's 8-step training run took minutes a step.
    """
    if device != "cpu":
        return True
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch without the probe: fp32, the safe side
        return False


def _evaluate(
    model: Any, encoded: Sequence[tuple[list[int], list[int]]], pad: int, config: TrainConfig
) -> float | None:
    if not encoded:
        return None
    import torch

    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(encoded), config.batch_size):
            batch = encoded[i : i + config.batch_size]
            total += float(_step(model, batch, pad, config.bf16)) * len(batch)
            count += len(batch)
    model.train()
    return total / count


def _save_checkpoint(model: Any, optimizer: Any, folder: Path, step: int, config: TrainConfig, n: int) -> None:
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder))
    torch.save(optimizer.state_dict(), folder / "optimizer.pt")
    state = {"step": step, "config": asdict(config), "samples": n}
    (folder / "state.json").write_text(json.dumps(state), encoding="utf-8")


def _load_checkpoint(model: Any, optimizer: Any, folder: Path, config: TrainConfig, n: int) -> int:
    import torch
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    state = json.loads((folder / "state.json").read_text(encoding="utf-8"))
    if state["config"] != asdict(config) or state["samples"] != n:
        raise TrainingError(
            f"{folder}: the checkpoint is from a run with other settings or data; "
            "use the same options, or drop --resume to start over"
        )
    set_peft_model_state_dict(model, load_file(str(folder / "adapter_model.safetensors")))
    optimizer.load_state_dict(torch.load(folder / "optimizer.pt"))
    return int(state["step"])
