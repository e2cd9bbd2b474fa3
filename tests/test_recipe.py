"""Training defaults from the pool size: small pools seen more often, large ones given more rank."""

from __future__ import annotations

from extractor.training.recipe import recipe


def test_small_pools_get_more_epochs_and_large_pools_more_rank() -> None:
    small, large = recipe(250), recipe(9_500)
    assert (small.epochs, small.rank) == (10.0, 16)
    assert (large.epochs, large.rank) == (2.0, 64)
    assert recipe(2_000).rank == 32
    assert recipe(250).epochs * 250 >= 2_500  # every pool is seen a few thousand times


def test_what_the_analyst_gives_is_kept_and_the_description_says_what_was_chosen() -> None:
    given = recipe(250, epochs=1.5, rank=8)
    assert (given.epochs, given.rank, given.chosen) == (1.5, 8, ())
    assert given.describe() == "1.5 epochs, rank 8"
    assert "from the pool size: rank" in recipe(250, epochs=2).describe()


def test_the_trainer_gets_the_recipe_with_alpha_twice_the_rank() -> None:
    config = recipe(9_500).config(learning_rate=3e-4, batch_size=64, seed=1)
    assert (config.epochs, config.rank, config.alpha, config.batch_size, config.seed) == (2.0, 64, 128, 64, 1)
