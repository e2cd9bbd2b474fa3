"""The settings reference (docs/reference/settings.md): every setting once, what a user sets first, the rest apart."""

from __future__ import annotations

import re
from dataclasses import fields

from extractor.config import Settings, repo_root

PAGE = repo_root() / "docs" / "reference" / "settings.md"


def rows(text: str) -> list[set[str]]:
    """The settings each table row names (a row may name two: host and port)."""
    return [
        {name.lower() for name in re.findall(r"`EXTRACTOR_([A-Z_]+)`", line.split("|")[1])}
        for line in text.splitlines()
        if line.startswith("| `EXTRACTOR_")
    ]


def test_every_setting_has_one_row() -> None:
    named = [name for row in rows(PAGE.read_text(encoding="utf-8")) for name in row]
    assert sorted(named) == sorted(f.name for f in fields(Settings))


def test_what_a_user_sets_comes_first_and_the_rest_under_advanced_and_experimental() -> None:
    text = PAGE.read_text(encoding="utf-8")
    first, advanced = text.split("\n## Advanced\n")
    advanced, experimental = advanced.split("\n## Experimental levers\n")
    assert 20 <= len(rows(first)) <= 35
    assert {"home", "model", "engine", "vllm_args", "api_keys"} <= set().union(*rows(first))
    assert {"dtype", "mask_threads", "header_timeout_s"} <= set().union(*rows(advanced))
    assert set().union(*rows(experimental)) == {"speculative_tokens"}
