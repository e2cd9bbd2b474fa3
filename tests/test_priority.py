"""The CPU engine's processes at a lower priority than the service (extractor.engines.priority)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from extractor import Settings
from extractor.engines import priority
from extractor.errors import ConfigError

SPIN = (
    "import threading, time\n"
    "for _ in range(3): threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
    "time.sleep(30)"
)


def nice_of(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="nice per thread through /proc: Linux")
def test_every_thread_of_the_children_gets_the_nice_value_and_this_process_keeps_its_own() -> None:
    child = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        deadline = time.monotonic() + 10
        while len(priority.threads_of([child.pid])) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.pid in priority.children()
        mine = nice_of(0)
        assert priority.lower([child.pid], 10) == 4  # the main thread and its 3 threads
        assert all(nice_of(t) == 10 for t in priority.threads_of([child.pid]))
        assert nice_of(0) == mine
        assert priority.lower([child.pid], 5) == 0  # never lowers a nice value (nor could it, unprivileged)
    finally:
        child.kill()
        child.wait()


def test_zero_leaves_the_engine_alone_and_a_gone_process_is_skipped() -> None:
    assert priority.lower([os.getpid()], 0) == 0
    assert priority.lower([2**22 + 12345], 10) == 0


@pytest.mark.parametrize("value", ["-1", "20"])
def test_the_setting_names_its_range(value: str) -> None:
    with pytest.raises(ConfigError, match="EXTRACTOR_ENGINE_NICE: a nice value from 0 to 19"):
        Settings.from_env({"EXTRACTOR_ENGINE_NICE": value})


def test_only_serve_lowers_the_engine_by_default() -> None:
    from extractor.server.runner import SERVE_ENGINE_NICE

    assert Settings.from_env({}).engine_nice is None  # batch, eval, the API: the engine left as it is
    assert SERVE_ENGINE_NICE == 10
    assert Settings.from_env({"EXTRACTOR_ENGINE_NICE": "0"}).engine_nice == 0
