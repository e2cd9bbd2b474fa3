"""A tuning candidate wins only beyond the noise of its cases: the paired bootstrap."""

from __future__ import annotations

import pytest

from extractor.jobs import noise, tuning


def test_the_same_counts_differ_by_nothing() -> None:
    cases = [(1, 0, 1), (2, 1, 0), (0, 0, 2)] * 10
    found = noise.difference(cases, cases)
    assert (found.delta, found.low, found.high) == (0.0, 0.0, 0.0) and not found.beyond_noise


def test_a_small_gain_on_few_cases_is_noise_and_a_large_one_is_not() -> None:
    # 38 cases, about 4 values each: one more value right on 3 of them (landmark_slots' 0.594 -> 0.625).
    a = [(2, 2, 2)] * 38
    b = [(3, 1, 1)] * 3 + [(2, 2, 2)] * 35
    small = noise.difference(a, b)
    assert small.delta > 0 and small.low <= 0 < small.high and not small.beyond_noise
    c = [(4, 0, 0)] * 30 + [(2, 2, 2)] * 8
    assert noise.difference(a, c).beyond_noise
    assert noise.difference(c, a).high < 0  # and the other way round, beyond noise below
    assert "[" in small.shown() and small.shown().startswith("+")


def test_paired_cases_must_match() -> None:
    with pytest.raises(ValueError, match="paired cases"):
        noise.difference([(1, 0, 0)], [])


def test_the_winner_is_the_simplest_within_noise_of_the_best() -> None:
    def row(label: str, k: int, hints: bool, cases: list[noise.CaseCounts], speed: float = 1.0) -> tuning.Row:
        candidate = tuning.Candidate(label, {"examples_from_pool": {"k": k, "hints": hints}})
        return tuning.Row(candidate, {"f1": noise.micro_f1(cases), "docs_per_s": speed}, cases=cases)

    base = [(2, 2, 2)] * 38
    rows = [
        row("k=3, hints on", 3, True, [(3, 1, 1)] * 3 + base[3:]),
        row("k=3, hints off", 3, False, base),
        row("k=0, hints off", 0, False, [(0, 0, 4)] * 38, speed=5.0),
    ]
    chosen = tuning.winner(rows)
    assert chosen.candidate.label == "k=3, hints off"  # the hints' gain is noise; no examples is worse beyond it
    assert rows[2].against_best is not None and rows[2].against_best.high < 0
    clear = [row("k=3, hints on", 3, True, [(4, 0, 0)] * 38), *rows[1:]]
    assert tuning.winner(clear).candidate.label == "k=3, hints on"
