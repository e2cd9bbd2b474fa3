"""The benchmark suite's shape: a few top-level modules, no import circle, answered experiments apart."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"


def bench_imports() -> dict[str, set[str]]:
    """Each module under ``bench/`` and the ``bench`` modules it imports at any depth of its code."""
    paths = [p for p in BENCH.rglob("*.py") if p.name != "__init__.py"]
    names = {".".join(p.relative_to(BENCH.parent).with_suffix("").parts) for p in paths}
    graph: dict[str, set[str]] = {}
    for path in paths:
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                deps.update({node.module, *(f"{node.module}.{alias.name}" for alias in node.names)})
            elif isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names)
        graph[".".join(path.relative_to(BENCH.parent).with_suffix("").parts)] = deps & names
    return graph


def reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen: set[str] = set()
    todo = list(graph[start])
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(graph[name])
    return seen


def test_the_suite_is_at_most_15_top_level_modules() -> None:
    assert len([p for p in BENCH.glob("*.py") if p.name != "__init__.py"]) <= 15


def test_no_bench_module_imports_one_that_imports_it_back() -> None:
    graph = bench_imports()
    assert [name for name in graph if name in reaches(graph, name)] == []


def test_the_suite_imports_no_experiment() -> None:
    graph = bench_imports()
    suite = [name for name in graph if not name.startswith("bench.experiments.")]
    assert {name: sorted(d for d in graph[name] if d.startswith("bench.experiments.")) for name in suite} == {
        name: [] for name in suite
    }


def _pages() -> dict[Path, str]:
    """The documentation's pages (the site's and the README) and the benchmark results pages."""
    paths = [
        *(ROOT / "docs").rglob("*.md"),
        ROOT / "README.md",
        *(BENCH / "results").glob("*.md"),
        BENCH / "gpu" / "README.md",
    ]
    return {path: path.read_text(encoding="utf-8") for path in paths}


def test_an_experiment_stays_while_a_page_names_it() -> None:
    text = "\n".join(_pages().values())
    names = [p.stem for p in (BENCH / "experiments").glob("*.py") if p.name != "__init__.py"]
    assert [n for n in names if f"bench.experiments.{n}" not in text and f"bench/experiments/{n}.py" not in text] == []


def test_the_guides_name_only_bench_commands_that_exist() -> None:
    """A command the site or the README gives (``python -m bench.X``) names a module of the tree."""
    guides = {p: text for p, text in _pages().items() if BENCH not in p.parents}
    named = {m for text in guides.values() for m in re.findall(r"python3? -m (bench(?:\.[a-z_]+)+)", text)}
    assert {"bench.gpu_bench", "bench.experiments.lifecycle"} <= named
    paths = {m: ROOT.joinpath(*m.split(".")) for m in named}
    assert sorted(m for m, p in paths.items() if not p.with_suffix(".py").is_file() and not p.is_dir()) == []
