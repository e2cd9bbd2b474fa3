"""The spawn trap, caught before vLLM meets it: a main program its engine core cannot import again.

vLLM starts its engine core (and workers) with multiprocessing's ``spawn`` (always on the CPU; on
CUDA unless ``VLLM_WORKER_MULTIPROC_METHOD=fork``), and a spawned child imports the parent's main
program again, as ``__mp_main__``. Two mains fail there, deep in vLLM, as "Engine core
initialization failed":

- a program read from stdin (``python -`` or ``python < script.py``): the child looks for a file
  called ``<stdin>`` (``FileNotFoundError``);
- a script without ``if __name__ == "__main__":``: the child runs its top level again, which starts
  another engine inside the bootstrapping child.

:func:`check` looks at the main program before an in-process engine starts and raises a
:class:`~extractor.errors.ConfigError` saying what to do. A main without a file (``python -c``, a
REPL, a notebook) is not imported again, so it passes; so does the own-process engine
(:mod:`extractor.engines.process`), whose child has a main of ours.
"""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path
from types import ModuleType

from extractor.errors import ConfigError

FIX = (
    'put the code in a file, under `if __name__ == "__main__":` (the engine\'s processes import the main '
    "program again, and must not start the engine when they do), and run `python that_file.py`"
)


def main_file(main: ModuleType) -> str | None:
    """The file a spawned child would import again for ``main`` (None: it imports nothing)."""
    spec = getattr(main, "__spec__", None)
    if spec is not None and getattr(spec, "name", None):  # `python -m module`: imported by its name
        return getattr(spec, "origin", None)
    return getattr(main, "__file__", None)


def guarded(source: str) -> bool:
    """Whether ``source`` has a top-level ``if __name__ == "__main__":``."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return True  # not ours to judge
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and len(node.test.comparators) == 1:
            sides = [node.test.left, node.test.comparators[0]]
            names = {s.id for s in sides if isinstance(s, ast.Name)}
            values = {s.value for s in sides if isinstance(s, ast.Constant)}
            if names == {"__name__"} and values == {"__main__"}:
                return True
    return False


def spawns(environ: os._Environ[str] | dict[str, str], cuda: bool) -> bool:
    """Whether vLLM will spawn its processes (on CUDA only ``VLLM_WORKER_MULTIPROC_METHOD=fork`` forks)."""
    return not (cuda and environ.get("VLLM_WORKER_MULTIPROC_METHOD") == "fork")


def check(*, cuda: bool, main: ModuleType | None = None) -> None:
    """Raise :class:`ConfigError` when vLLM's spawned processes could not import the main program again."""
    if not spawns(os.environ, cuda):
        return
    main = main if main is not None else sys.modules.get("__main__")
    if main is None or main.__name__ == "__mp_main__":  # already inside a spawned child
        return
    path = main_file(main)
    if path is None:
        return
    file = Path(path)
    if not file.is_file():
        raise ConfigError(
            f"an in-process engine cannot start from a main program without a file ({path}: `python -` or "
            f"a program piped to python): vLLM's engine core imports the main program again from its file; {FIX}"
        )
    try:
        source = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return
    if not guarded(source):
        raise ConfigError(
            f'{file}: the in-process engine is started from a script without `if __name__ == "__main__":`; '
            f"vLLM's engine core runs the script's top level again and would start another engine; {FIX}"
        )
