"""Engines sharing a GPU start one at a time (extractor.engines.gpu_start)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from extractor.engines import gpu_start


def test_a_second_start_on_the_same_gpu_waits_for_the_first(tmp_path: Path) -> None:
    order: list[str] = []
    first_in = threading.Event()

    def second() -> None:
        first_in.wait()
        with gpu_start.one_at_a_time(tmp_path, "0") as waited:
            order.append(f"second after {waited:.1f}")

    thread = threading.Thread(target=second)
    thread.start()
    with gpu_start.one_at_a_time(tmp_path, "0"):
        first_in.set()
        time.sleep(0.5)  # the first engine still taking its memory
        order.append("first done")
    thread.join(timeout=10)
    assert order[0] == "first done"
    assert order[1].startswith("second after") and float(order[1].split()[-1]) >= 0.3


def test_other_gpus_start_at_once(tmp_path: Path) -> None:
    with gpu_start.one_at_a_time(tmp_path, "0"), gpu_start.one_at_a_time(tmp_path, "1") as waited:
        assert waited < 0.5
    assert gpu_start.lock_path(tmp_path, "0") != gpu_start.lock_path(tmp_path, "1")
    assert gpu_start.lock_path(tmp_path, None).name == "all.lock"
    assert gpu_start.lock_path(tmp_path, "GPU-ab/../x").parent == tmp_path / "run" / "gpu-start"
