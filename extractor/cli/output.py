"""A command's stdout: its result alone (JSON where it prints JSON), the engine's output sent to stderr."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from typing import Any


def print_json(value: Any) -> None:
    """``value`` on stdout as indented JSON, non-ASCII as it is."""
    sys.stdout.write(json.dumps(value, ensure_ascii=False, indent=2) + "\n")


@contextlib.contextmanager
def engine_output_to_stderr() -> Iterator[None]:
    """Point file descriptor 1 at stderr while the engine runs.

    vLLM and the worker processes it spawns log to stdout; the command's stdout is for the JSON
    result alone, so that `extractor extract ... | jq` works.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
