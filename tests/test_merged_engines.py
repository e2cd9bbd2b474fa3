"""Adapters served merged: each request goes to its adapter's engine, the rest to the base model's."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from extractor import ScriptedEngine, Settings
from extractor.config import repo_root
from extractor.engines import GenerationRequest
from extractor.engines.merged import MergedAdapters, merged_folder
from extractor.errors import ConfigError, EngineError

SHIPPED = repo_root() / "adapters" / "snips"


def ask(engine: MergedAdapters, adapter: str | None) -> str:
    request = GenerationRequest(messages=[{"role": "user", "content": "hi"}], adapter=adapter)
    return asyncio.run(engine.generate(request)).text


def test_requests_go_to_their_adapters_engine_and_an_unknown_adapter_says_restart() -> None:
    engines = MergedAdapters(Settings.from_env(), [SHIPPED])  # the default model, prepared by `make setup`
    assert list(engines.adapters) == [str(SHIPPED)]
    engines._base = ScriptedEngine(["base"] * 2)  # type: ignore[assignment]  # stand-ins for vLLM's engines
    engines._engines[str(SHIPPED)] = ScriptedEngine(["merged"])  # type: ignore[assignment]
    assert ask(engines, None) == "base"
    assert ask(engines, str(SHIPPED)) == "merged"
    with pytest.raises(EngineError, match="not in the catalog when the engine started; restart"):
        ask(engines, "/elsewhere/adapters/new")


def test_an_adapter_of_another_base_model_is_refused_by_its_tasks_only(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}), encoding="utf-8")
    engines = MergedAdapters(Settings.from_env(model=str(tmp_path)), [SHIPPED])
    assert engines.adapters == {}
    engines._base = ScriptedEngine(["base"])  # type: ignore[assignment]
    with pytest.raises(EngineError, match=r"trained on base model .*EXTRACTOR_ADAPTER_SERVING=off"):
        ask(engines, str(SHIPPED))
    assert ask(engines, None) == "base"


def test_the_merge_is_named_by_both_weights_and_the_mode_is_checked(tmp_path: Path) -> None:
    settings = Settings.from_env(home=tmp_path)
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text("{}", encoding="utf-8")
    first = merged_folder(settings, base, SHIPPED)
    assert first.parent == settings.models_dir and first.name.startswith("merged-snips-")
    (base / "config.json").write_text(json.dumps({"hidden_size": 8}), encoding="utf-8")
    assert merged_folder(settings, base, SHIPPED) != first  # another base model: another merge
    with pytest.raises(ConfigError, match="EXTRACTOR_ADAPTER_SERVING: unknown mode 'fast'"):
        Settings.from_env(adapter_serving="fast")


def test_a_command_for_one_task_starts_only_the_engines_that_task_needs() -> None:
    from extractor import Extractor

    settings = Settings.from_env(engine="vllm")
    assert Extractor(settings=settings)._merged_adapters() == [SHIPPED]  # the catalog: every SNIPS task
    assert Extractor(settings=settings, tasks=["snips_get_weather"])._merged_adapters() == [SHIPPED]
    assert Extractor(settings=settings, tasks=["landmark_slots"])._merged_adapters() == []  # the base model only
    assert Extractor(settings=settings.with_(adapter_serving="lora"))._merged_adapters() == []


def test_auto_serving_merges_on_cpu_and_few_adapters_on_a_gpu_lora_beyond() -> None:
    from extractor.engines.adapter_serving import MERGED_MAX_ON_GPU, choose

    gib = 2**30
    small = {"weights_bytes": gib // 4, "gpu_bytes": 140 * gib, "memory_utilization": 0.5}
    assert choose(adapters=20, cuda=False, **small)[0] == "merged"  # CPU: LoRA decodes 3-5x slower
    assert choose(adapters=MERGED_MAX_ON_GPU, cuda=True, **small)[0] == "merged"
    mode, why = choose(adapters=MERGED_MAX_ON_GPU + 1, cuda=True, **small)
    assert mode == "lora" and "start too slowly" in why
    big = {**small, "weights_bytes": 15 * gib}  # a 7B model: 5 shares of 14 GiB cannot hold 2 copies each
    mode, why = choose(adapters=4, cuda=True, **big)
    assert mode == "lora" and "cannot hold" in why
    assert choose(adapters=1, cuda=True, **big)[0] == "merged"  # 2 shares of 35 GiB
    assert choose(adapters=4, cuda=True, **{**big, "gpu_bytes": None})[0] == "merged"  # unknown memory


def test_auto_serving_is_made_concrete_when_the_extractor_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    from extractor import Extractor
    from extractor.engines import adapter_serving, vllm

    settings = Settings.from_env(engine="vllm")
    assert Extractor(settings=settings).settings.adapter_serving == "merged"  # this machine: CPU
    monkeypatch.setattr(vllm, "has_cuda", lambda: True)
    monkeypatch.setattr(adapter_serving, "MERGED_MAX_ON_GPU", 0)
    lora = Extractor(settings=settings)
    assert lora.settings.adapter_serving == "lora" and lora.settings.max_lora_rank == 8
    assert lora._merged_adapters() == []
    assert Extractor(settings=settings.with_(adapter_serving="merged")).settings.adapter_serving == "merged"
