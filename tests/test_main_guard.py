"""The spawn trap: an in-process engine from stdin or from a script without a __main__ guard is refused first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from extractor.engines import main_guard
from extractor.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
START = (
    "from extractor import Extractor, Settings\n"
    "with Extractor(settings=Settings.from_env(engine='vllm'), tasks=['landmark_slots']) as ex:\n"
    "    ex.start()\n"
    "    print('started')\n"
)


def module(file: str | None, spec_name: str | None = None) -> ModuleType:
    main = ModuleType("__main__")
    if file is not None:
        main.__file__ = file
    main.__spec__ = SimpleNamespace(name=spec_name, origin=file) if spec_name else None  # type: ignore[assignment]
    return main


def test_a_guard_is_found_either_way_round() -> None:
    assert main_guard.guarded('import x\nif __name__ == "__main__":\n    x.run()\n')
    assert main_guard.guarded("if '__main__' == __name__:\n    pass\n")
    assert not main_guard.guarded("from extractor import extract\nextract('t', 'x')\n")
    assert not main_guard.guarded("def f():\n    if __name__ == '__main__':\n        pass\n")  # not top level


def test_mains_that_spawned_processes_cannot_import_again_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD", raising=False)
    with pytest.raises(ConfigError, match=r"without a file \(<stdin>.*if __name__ == \"__main__\":"):
        main_guard.check(cuda=False, main=module("<stdin>"))
    script = tmp_path / "job.py"
    script.write_text(START)
    with pytest.raises(ConfigError, match=r"job.py: the in-process engine is started from a script without"):
        main_guard.check(cuda=False, main=module(str(script)))
    script.write_text('if __name__ == "__main__":\n    pass\n')
    main_guard.check(cuda=False, main=module(str(script)))
    main_guard.check(cuda=False, main=module(None))  # python -c, a REPL: nothing is imported again
    main_guard.check(cuda=False, main=module(str(script), spec_name="job"))
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "fork")
    main_guard.check(cuda=True, main=module("<stdin>"))  # CUDA with fork: no child imports the main


def _run(args: list[str], *, stdin: str | None = None, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    env["EXTRACTOR_VLLM_ARGS"] = '{"no_such_argument": 1}'  # were the check to miss, vLLM's start fails at once
    return subprocess.run(
        [sys.executable, *args], input=stdin, capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )


def test_python_stdin_gets_the_error_before_vllm_starts(tmp_path: Path) -> None:
    done = _run(["-"], stdin=START, cwd=tmp_path)
    assert done.returncode != 0 and "started" not in done.stdout
    assert "ConfigError: an in-process engine cannot start from a main program without a file" in done.stderr
    assert "Engine core initialization failed" not in done.stderr
    script = tmp_path / "job.py"
    script.write_text(START)
    done = _run([str(script)], cwd=tmp_path)
    assert done.returncode != 0 and 'without `if __name__ == "__main__":`' in done.stderr


def test_every_main_module_the_project_ships_is_guarded() -> None:
    # `python -m extractor.cli serve` starts an in-process engine: its spawned core imports this module again
    mains = sorted(ROOT.glob("extractor/**/__main__.py")) + sorted(ROOT.glob("bench/**/__main__.py"))
    assert mains
    for path in mains:
        main_guard.check(cuda=False, main=module(str(path), spec_name=path.parent.name + ".__main__"))
