"""The door to vLLM's internals: one entry point, hooks only on the vLLM releases they were checked on, one line.

Each hook's own behaviour: ``test_vllm_masks.py`` and ``test_vllm_checks.py``.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import logging
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import extractor
from extractor import vllm_plugins
from extractor.vllm_plugins import masks, versions

structured = pytest.importorskip("vllm.v1.structured_output")

PACKAGE = Path(extractor.__file__).parent
ROOT = PACKAGE.parent


def declared() -> dict[str, str]:
    """The ``vllm.general_plugins`` entry points pyproject.toml declares."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return dict(project["entry-points"]["vllm.general_plugins"])


def test_one_door_for_the_hooks_and_every_entry_point_resolves() -> None:
    points = declared()
    assert points["extractor_hooks"] == "extractor.vllm_plugins:register"
    for target in points.values():
        module, name = target.split(":")
        assert callable(getattr(importlib.import_module(module), name))


def test_vllm_finds_the_plugins() -> None:
    code = "from vllm.plugins import load_plugins_by_group as g; print(' '.join(g('vllm.general_plugins')))"
    listed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    installed = {point.name for point in importlib.metadata.entry_points(group="vllm.general_plugins")}
    if not installed >= set(declared()):
        pytest.skip(f"the installed metadata predates pyproject.toml ({sorted(installed)}): `pip install -e .` again")
    assert set(listed.stdout.strip().splitlines()[-1].split()) >= set(declared())


def test_the_door_patches_what_is_asked_and_names_what_it_left(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    original = structured.StructuredOutputManager.grammar_bitmask
    monkeypatch.setattr(structured.StructuredOutputManager, "grammar_bitmask", original)
    monkeypatch.delenv(masks.ENV, raising=False)
    with caplog.at_level(logging.INFO, logger="vllm.extractor"):
        assert vllm_plugins.register() == ["grammar checks"]
    assert structured.StructuredOutputManager.grammar_bitmask is original
    line = caplog.records[-1].getMessage()
    assert "patched grammar checks (backend_guidance.validate_guidance_grammar" in line
    assert "left alone mask pool (EXTRACTOR_MASK_THREADS unset or 0)" in line
    monkeypatch.setenv(masks.ENV, "2")
    with caplog.at_level(logging.INFO, logger="vllm.extractor"):
        assert vllm_plugins.register() == ["mask pool", "grammar checks"]
    assert structured.StructuredOutputManager.grammar_bitmask is not original
    line = caplog.records[-1].getMessage()
    assert "token masks filled by llguidance's pool of 2 threads" in line and "left alone nothing" in line


def test_a_vllm_release_no_hook_was_checked_on_is_left_alone(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    original = structured.StructuredOutputManager.grammar_bitmask
    monkeypatch.setattr(structured.StructuredOutputManager, "grammar_bitmask", original)
    monkeypatch.setenv(masks.ENV, "2")
    monkeypatch.setattr(versions, "installed", lambda: "0.99.1")
    with caplog.at_level(logging.INFO, logger="vllm.extractor"):
        assert vllm_plugins.register() == []
    assert structured.StructuredOutputManager.grammar_bitmask is original
    line = caplog.records[-1].getMessage()
    assert "vLLM 0.99.1: patched nothing; left alone mask pool (checked on vLLM 0.26, 0.32 only)" in line


def test_releases_are_read_from_version_strings() -> None:
    assert versions.release("0.26.0+cu130") == "0.26" and versions.release("0.32.0") == "0.32"
    assert versions.checked(versions.MASKS, "0.32.1") and not versions.checked(versions.MASKS, "0.33.0")
    assert versions.checked(versions.CHECKS, versions.installed())  # the vLLM the suite runs on


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_nothing_outside_the_plugins_imports_them() -> None:
    """vLLM enters the hooks through its entry points; the engines reach them only through their requests."""
    outside = [p for p in PACKAGE.rglob("*.py") if "vllm_plugins" not in p.parts]
    importing = [str(p.relative_to(ROOT)) for p in outside if any("vllm_plugins" in m for m in _imports(p))]
    assert importing == []


def _environment_reads(path: Path) -> list[str]:
    """``EXTRACTOR_*`` names this module reads from the environment (a literal, or a module constant)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }

    def name(node: ast.expr) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        return constants.get(node.id, "") if isinstance(node, ast.Name) else ""

    read: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute | ast.Name):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            of = ast.unparse(node.func)
            if called == "getenv" or (called in ("get", "pop") and "environ" in of):
                read.append(name(node.args[0]))
        elif (
            isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and "environ" in ast.unparse(node.value)
        ):
            read.append(name(node.slice))
    return [r for r in read if r.startswith("EXTRACTOR_")]


def test_every_setting_is_read_through_settings() -> None:
    """Outside ``config.py`` only vLLM's processes read ``EXTRACTOR_*`` themselves: the hooks and the lifeline guard."""
    allowed = {PACKAGE / "config.py", PACKAGE / "engines" / "lifeline.py"}
    reads = {
        str(path.relative_to(ROOT)): found
        for path in PACKAGE.rglob("*.py")
        if path not in allowed and "vllm_plugins" not in path.parts and (found := _environment_reads(path))
    }
    assert reads == {}
    assert _environment_reads(PACKAGE / "engines" / "lifeline.py")  # the check sees a read through a constant
