"""Shared fixtures: the shipped catalog, scripted extractors, and one real vLLM engine per session."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from extractor import Catalog, Extractor, ScriptedEngine, Settings
from extractor.config import repo_root
from extractor.models import default_model_dir

from .postgres import Cluster, cluster

LANDMARK_TEXT = "阿尔罕布拉宫是西班牙摩尔人统治时期的宫殿建筑。"

# On a GPU each engine takes this share of its memory up front: the session engine, the engines of
# CLI subprocesses (some killed on purpose) and `vllm serve` must fit beside one another (CPU: ignored).
os.environ.setdefault("EXTRACTOR_GPU_MEMORY_UTILIZATION", "0.12")
# Every engine of the suite (the session's, CLI subprocesses', Ray actors') starts eager: vLLM 0.32
# compiles the model again at each start on the CPU (about 3 minutes on 2 cores; eager: 44 s).
# The tests assert behaviour, not speed; the benchmarks run as shipped.
os.environ.setdefault("EXTRACTOR_ENFORCE_EAGER", "1")


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return Catalog.load(repo_root())


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings.from_env({}, home=tmp_path / "home", engine="scripted")


@pytest.fixture
def engine() -> ScriptedEngine:
    return ScriptedEngine()


@pytest.fixture
def extractor(catalog: Catalog, settings: Settings, engine: ScriptedEngine) -> Extractor:
    return Extractor(settings=settings, engine=engine, catalog=catalog)


def landmark(**values: str | None) -> str:
    """A landmark_slots answer: every slot null unless given."""
    data = dict.fromkeys(("name", "country", "city", "category", "period"))
    data.update(values)
    return json.dumps(data, ensure_ascii=False)


@pytest.fixture(scope="session")
def tokenizers() -> tuple[Any, Any]:
    """The default model's Hugging Face tokenizer and llguidance's view of it (grammar and mask tests)."""
    from transformers import AutoTokenizer

    model = default_model_dir(Settings.from_env({}))
    if not (model / "tokenizer.json").is_file():
        pytest.fail(f"{model}: the default model is not prepared; run `make setup` (extractor model prepare)")
    import llguidance.hf

    hf: Any = AutoTokenizer.from_pretrained(str(model))
    return hf, llguidance.hf.from_tokenizer(hf)


@pytest.fixture(scope="session")
def real_extractor() -> Iterator[Extractor]:
    """The real vLLM engine on the default model, started once for the whole session."""
    settings = Settings.from_env(engine="vllm", max_num_seqs=16, kv_cache_space_gib=2)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(settings.kv_cache_space_gib))
    extractor = Extractor(settings=settings)
    extractor.start()
    yield extractor
    extractor.close()


@pytest.fixture(scope="session")
def postgres() -> Iterator[Cluster]:
    """A PostgreSQL cluster of Debian's server binaries for the session (fails naming how to install them)."""
    with cluster() as running:
        yield running


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest) -> str | None:
    """The review queue's database, once per backend: None (SQLite under home), then a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return None
    running: Cluster = request.getfixturevalue("postgres")
    return running.url(running.create_database())


@pytest.hookimpl(tryfirst=True)  # before `-m` selects: the marker added here counts
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that shares a module fixture with a real-engine test is marked ``engine`` with it.

    ``make test`` runs the tests without the engine first, a file per xdist worker, then the engine's in
    one process: a module fixture both use (the adapter ``test_training.py`` trains) is then made once.
    """
    on_engine = [i for i in items if i.get_closest_marker("engine") and not i.get_closest_marker("slow")]
    shared = {(item.path, name) for item in on_engine for name in _module_fixtures(item)}
    for item in items:
        if not item.get_closest_marker("engine") and any((item.path, n) in shared for n in _module_fixtures(item)):
            item.add_marker(pytest.mark.engine)


def _module_fixtures(item: pytest.Item) -> set[str]:
    """The module-scoped fixtures ``item`` uses (a test's own, not conftest's session ones)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return set()
    return {name for name, defs in info.name2fixturedefs.items() if defs and defs[-1].scope == "module"}
