"""The command line, run as a user runs it (a subprocess) where that matters."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from extractor.cli import main
from extractor.config import repo_root

from .conftest import LANDMARK_TEXT


def run_cli(
    *args: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "extractor.cli", *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )


def bad_catalog(root: Path) -> Path:
    (root / "schemas").mkdir(parents=True)
    (root / "prompts").mkdir()
    (root / "schemas" / "leak.json").write_text(
        json.dumps({"type": "object", "properties": {"secret": {"$ref": "file:///etc/passwd"}}})
    )
    (root / "prompts" / "leak.j2").write_text("{{ text }}")
    (root / "schemas" / "fine.json").write_text(json.dumps({"type": "object", "properties": {"a": {"type": "string"}}}))
    (root / "prompts" / "fine.j2").write_text("Extract a from: {{ text }}")
    return root


def test_tasks_check_names_the_bad_file(tmp_path: Path) -> None:
    root = bad_catalog(tmp_path / "BAD")
    done = run_cli("tasks", "check", "--tasks-dir", str(root))
    assert done.returncode == 1
    assert str(root / "schemas" / "leak.json") in done.stderr
    assert "#/properties/secret/$ref" in done.stderr and "outside this schema" in done.stderr
    assert "fine" in done.stdout  # the good task still loads


def test_tasks_check_passes_on_shipped_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "check", "--tasks-dir", str(repo_root())]) == 0
    assert "landmark_slots" in capsys.readouterr().out


def test_tasks_env_var_sets_catalog_root(tmp_path: Path) -> None:
    root = bad_catalog(tmp_path / "cat")
    done = run_cli("tasks", "--json", env={"EXTRACTOR_TASKS_DIR": str(root)})
    listed = json.loads(done.stdout)
    assert [t["name"] for t in listed["tasks"]] == ["fine"] and len(listed["errors"]) == 1


def test_extract_dry_run_on_scripted_engine() -> None:
    done = run_cli("extract", "landmark_slots", "--engine", "scripted", stdin=LANDMARK_TEXT)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["task"] == "landmark_slots" and result["model"] == "scripted-dry-run"


def test_unknown_task_and_missing_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["extract", "nope", "--text", "x", "--engine", "scripted"]) == 2
    assert "unknown task 'nope'; known tasks: landmark_slots" in capsys.readouterr().err


def test_model_not_prepared_names_the_command(tmp_path: Path) -> None:
    done = run_cli("extract", "landmark_slots", "--text", LANDMARK_TEXT, "--home", str(tmp_path))
    assert done.returncode == 2
    assert "extractor model prepare" in done.stderr


def test_engine_logs_never_reach_stdout(capfd: pytest.CaptureFixture[str]) -> None:
    from extractor.cli.output import engine_output_to_stderr

    with engine_output_to_stderr():
        os.write(1, b"INFO vllm log line\n")  # as vLLM's spawned workers do, below Python's sys.stdout
    print('{"ok": true}')
    out, err = capfd.readouterr()
    assert out == '{"ok": true}\n'
    assert "INFO vllm log line" in err


def test_boolean_settings_read_true_false_and_name_bad_values(capsys: pytest.CaptureFixture[str]) -> None:
    from extractor.config import Settings
    from extractor.errors import ConfigError

    assert Settings.from_env({"EXTRACTOR_GROUNDED_CLAUSES": "off"}).grounded_clauses is False
    assert Settings.from_env({"EXTRACTOR_GROUNDED_CLAUSES": "Yes"}).grounded_clauses is True
    with pytest.raises(ConfigError, match="EXTRACTOR_GROUNDED_CLAUSES: expected true or false, got 'maybe'"):
        Settings.from_env({"EXTRACTOR_GROUNDED_CLAUSES": "maybe"})
    with pytest.raises(ConfigError, match="EXTRACTOR_GROUNDED_MAX_WORDS: must be >= 1"):
        Settings.from_env({"EXTRACTOR_GROUNDED_MAX_WORDS": "0"})
    with pytest.raises(SystemExit):
        main(["tasks", "--grounded-clauses", "maybe"])
    assert "EXTRACTOR_GROUNDED_CLAUSES: expected true or false" in capsys.readouterr().err


def test_each_command_help_shows_its_own_options_and_the_settings_once(capsys: pytest.CaptureFixture[str]) -> None:
    from extractor.cli import build_parser

    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--help"])
    train = capsys.readouterr().out
    assert "--held-out" in train and "--home" in train and "--help-settings" in train
    assert "--api-keys" not in train and "--cors-origins" not in train and "--max-num-seqs" not in train
    assert len(train.splitlines()) < 60
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--help"])
    assert "--api-keys" in capsys.readouterr().out  # the service's own settings stay in its help
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--help-settings"])
    every = capsys.readouterr().out
    assert "--max-num-seqs" in every and "EXTRACTOR_MAX_NUM_SEQS" in every and "--port" in every
    # hidden from the help, still accepted where they apply
    assert parser.parse_args(["train", "t", "--max-num-seqs", "4"]).max_num_seqs == 4


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command and sub-command of ``parser`` (``review list``), with its name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield " ".join((*path, name)), sub
                yield from _commands(sub, (*path, name))


def test_every_command_answers_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    """Each command's module registers it (extractor/cli/), in the order the top-level help lists them."""
    from extractor.cli import build_parser

    parser = build_parser()
    names = [name for name, _ in _commands(parser)]
    assert names == [
        *("extract", "codegen", "tasks", "model", "batch", "eval", "examples", "examples import"),
        *("review", "review list", "review export", "train", "calibrate", "tune", "serve", "mcp"),
    ]
    for name in names:
        with pytest.raises(SystemExit) as exited:
            parser.parse_args([*name.split(), "--help"])
        assert exited.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: extractor {name} [-h]")


def test_the_console_script_and_python_m_run_the_same_command() -> None:
    import importlib
    import tomllib

    scripts = tomllib.loads((repo_root() / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    module, _, name = scripts["extractor"].partition(":")
    assert getattr(importlib.import_module(module), name) is main
    done = run_cli("--help")
    assert done.returncode == 0 and "Structured extraction on vLLM." in done.stdout
    assert "{extract,codegen,tasks,model,batch,eval,examples,review,train,calibrate,tune,serve,mcp}" in done.stdout


def test_every_commands_help_fits_a_screen(monkeypatch: pytest.MonkeyPatch) -> None:
    """At most 60 lines at 80 columns: the options a command is run with, not every setting (--help-settings)."""
    from extractor.cli import build_parser

    monkeypatch.setenv("COLUMNS", "80")
    lengths = {name: len(sub.format_help().splitlines()) for name, sub in _commands(build_parser())}
    assert {"batch", "serve", "review list", "mcp"} <= set(lengths)
    assert {name: n for name, n in lengths.items() if n > 60} == {}
