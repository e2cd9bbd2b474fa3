"""The package layout: no module imports one that imports it back (directly or through others).

The packages' layers are import-linter's (pyproject.toml, `make lint`); here: every package is in one.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import extractor

ROOT = Path(extractor.__file__).parent


def imports() -> dict[str, set[str]]:
    """Each module of the package and the package modules it imports at any depth of its code."""
    found: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__")
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                deps.update(f"{node.module}.{alias.name}" for alias in node.names)
                deps.add(node.module)
            elif isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names)
        found[name] = {d for d in deps if d.startswith("extractor")}
    graph: dict[str, set[str]] = {}
    for name, deps in found.items():
        real = {d for d in deps if d in found and d != name}
        # `from pkg import sub` takes sub, not a name of pkg's own: no edge to the package itself
        packages = {d for d in real if any(other.startswith(d + ".") for other in real)}
        graph[name] = real - packages
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_imports_one_that_imports_it_back() -> None:
    assert circles(imports()) == []


def test_the_detector_finds_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_package_and_module_has_a_layer() -> None:
    contract = tomllib.loads((ROOT.parent / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    layered = {name.strip() for layer in contract["contracts"][0]["layers"] for name in layer.split("|")}
    units = {
        f"extractor.{p.stem}"
        for p in ROOT.iterdir()
        if not p.name.startswith("_") and (p.suffix == ".py" or (p / "__init__.py").is_file())
    }
    assert units - layered == set(), "place the new package in a layer of [tool.importlinter] in pyproject.toml"
