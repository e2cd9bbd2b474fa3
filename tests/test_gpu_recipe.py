"""The GPU recipe installs what pyproject.toml lists (issue 58: it once missed the typed-value libraries)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

from packaging.requirements import Requirement

from extractor.config import repo_root

RECIPE = repo_root() / "bench" / "gpu"


def load_wheels() -> ModuleType:
    """``bench/gpu/wheels.py``, a script the system Python runs (bench/gpu is no package)."""
    spec = importlib.util.spec_from_file_location("gpu_wheels", RECIPE / "wheels.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


wheels = load_wheels()


def installed(requirements: list[str]) -> dict[str, str]:
    """Each name the recipe brings for ``requirements`` -> how: a pin, resolved from pyproject, or the host's."""
    how = {wheels.name_of(p): p for p in wheels.pinned()}
    how |= {wheels.name_of(r): "resolved: " + r for r in wheels.project(requirements)}
    return how | {name: "host: " + why for name, why in wheels.HOST.items()}


def test_every_dependency_of_pyproject_is_installed_by_the_recipe() -> None:
    listed = wheels.dependencies()
    assert {str(Requirement(r).name).lower() for r in listed} >= {"dateparser", "cn2an", "pint", "mcp"}
    assert sorted(wheels.name_of(r) for r in listed if wheels.name_of(r) not in installed(listed)) == []


def test_a_dependency_pyproject_gains_is_installed_without_editing_the_recipe(tmp_path: Path) -> None:
    pyproject = (repo_root() / "pyproject.toml").read_text(encoding="utf-8")
    grown = tmp_path / "pyproject.toml"
    grown.write_text(pyproject.replace("dependencies = [\n", 'dependencies = [\n    "newlib>=1.2",\n', 1))
    listed = wheels.dependencies(grown)
    assert "newlib>=1.2" in listed and "newlib>=1.2" in wheels.project(listed)


def test_each_pin_of_a_dependency_meets_what_pyproject_asks() -> None:
    pins = {wheels.name_of(p): p.split("==", 1)[1] for p in wheels.pinned() if "==" in p}
    unmet = []
    for line in wheels.dependencies():
        requirement = Requirement(line)
        version = pins.get(wheels.name_of(line))
        if version is not None and not requirement.specifier.contains(version, prereleases=True):
            unmet.append(f"{line}: pinned {version}")
    assert unmet == []


def test_the_host_is_named_only_for_what_it_has() -> None:
    # a dependency left to the host is one the host image ships; none of them is pinned as well
    pinned = {wheels.name_of(p) for p in wheels.pinned()}
    assert set(wheels.HOST) & pinned == set()
    assert {wheels.name_of(r) for r in wheels.dependencies()} & set(wheels.HOST) <= {
        "transformers",
        "jinja2",
        "safetensors",
        "regex",
    }


def test_the_closure_downloads_what_pip_resolved_less_the_host_and_the_pins() -> None:
    report = {
        "install": [
            {"metadata": {"name": name, "version": version}}
            for name, version in [
                ("dateparser", "1.5.0"),
                ("Pint", "0.25.3"),
                ("tzlocal", "5.4.5"),
                ("regex", "2024.11.6"),  # the host's
                ("attrs", "26.1.0"),  # pinned
                ("torch", "2.11.0"),
                ("nvidia-cublas-cu12", "12.9"),
            ]
        ]
    }
    assert wheels.closure(report) == ["dateparser==1.5.0", "Pint==0.25.3", "tzlocal==5.4.5"]


def test_stage_sh_downloads_the_derived_lists_and_pins_no_dependency_by_hand() -> None:
    stage = (RECIPE / "stage.sh").read_text(encoding="utf-8")
    for part in ("pinned", "project", "closure"):
        assert re.search(rf"\$wheels {part}\b", stage), part
    by_hand = {wheels.name_of(m) for m in re.findall(r"([A-Za-z0-9][A-Za-z0-9._-]*)==", stage)}
    assert by_hand & {wheels.name_of(r) for r in wheels.dependencies()} == set()
