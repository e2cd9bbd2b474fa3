"""How hard to train, from how much there is to learn from. Pure.

An analyst should not have to know LoRA. ``extractor train`` without ``--epochs`` or ``--rank``
takes them from the number of training samples (``bench/results/learning_curve.md`` has the
figures behind these steps):

- small pools are seen more often: epochs fall from 10 (a few hundred lines) to 2 (10,000);
  every pool gets at least about 2,500 sample passes;
- large pools get more capacity: rank 16 under 1,000 samples, 32 up to 4,000, 64 beyond.

Alpha stays twice the rank (LoRA's usual scaling), so a higher rank does not change the step size.
"""

from __future__ import annotations

from dataclasses import dataclass

from extractor.training.trainer import TrainConfig

# Sample passes a run aims at; the epochs are clamped to [MIN_EPOCHS, MAX_EPOCHS].
TARGET_PASSES = 20_000
MIN_EPOCHS, MAX_EPOCHS = 2.0, 10.0
RANKS = ((1_000, 16), (4_000, 32))  # (fewer samples than this, rank); more than the last: WIDE_RANK
WIDE_RANK = 64


@dataclass(frozen=True)
class Recipe:
    """Epochs and LoRA rank for one training run, and where they came from."""

    epochs: float
    rank: int
    chosen: tuple[str, ...] = ()

    def config(self, *, learning_rate: float, batch_size: int, seed: int = 0, max_length: int = 512) -> TrainConfig:
        """The trainer's settings for this recipe (alpha twice the rank)."""
        return TrainConfig(
            epochs=self.epochs,
            rank=self.rank,
            alpha=2 * self.rank,
            learning_rate=learning_rate,
            batch_size=batch_size,
            max_length=max_length,
            seed=seed,
        )

    def describe(self) -> str:
        picked = f" (from the pool size: {', '.join(self.chosen)})" if self.chosen else ""
        return f"{self.epochs:g} epochs, rank {self.rank}{picked}"


def recipe(samples: int, *, epochs: float | None = None, rank: int | None = None) -> Recipe:
    """The run's epochs and rank: the ones given, else chosen from ``samples``."""
    chosen: list[str] = []
    if epochs is None:
        epochs = float(min(MAX_EPOCHS, max(MIN_EPOCHS, round(TARGET_PASSES / max(samples, 1)))))
        chosen.append("epochs")
    if rank is None:
        rank = next((r for limit, r in RANKS if samples < limit), WIDE_RANK)
        chosen.append("rank")
    return Recipe(epochs=epochs, rank=rank, chosen=tuple(chosen))
