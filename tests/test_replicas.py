"""EXTRACTOR_ENGINE_REPLICAS: engines of one model as one, each request to the engine holding fewest."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from extractor import Extractor, Settings
from extractor.engines import ScriptedEngine, create_engine
from extractor.engines.base import GenerationRequest
from extractor.engines.replicas import EngineReplicas
from extractor.engines.vllm import VLLMEngine
from extractor.errors import ConfigError

ASK = GenerationRequest(messages=[{"role": "user", "content": "hi"}])


def two(delay_s: float = 0.05) -> tuple[ScriptedEngine, ScriptedEngine, EngineReplicas]:
    first = ScriptedEngine(respond=lambda _: "first", delay_s=delay_s)
    second = ScriptedEngine(respond=lambda _: "second", delay_s=delay_s)
    return first, second, EngineReplicas([first, second])


def test_requests_in_flight_spread_evenly_and_the_counts_return_to_zero() -> None:
    first, second, replicas = two()

    async def run() -> list[str]:
        return [g.text for g in await asyncio.gather(*(replicas.generate(ASK) for _ in range(6)))]

    texts = asyncio.run(run())
    assert sorted(texts) == ["first"] * 3 + ["second"] * 3
    assert len(first.history) == len(second.history) == 3
    assert replicas.held() == [0, 0]


def test_one_at_a_time_every_request_goes_to_the_first_engine() -> None:
    first, second, replicas = two(delay_s=0.0)

    async def run() -> None:
        for _ in range(3):
            await replicas.generate(ASK)

    asyncio.run(run())
    assert (len(first.history), len(second.history)) == (3, 0)


def test_a_stream_holds_its_engine_until_closed() -> None:
    first, _, replicas = two(delay_s=0.2)

    async def run() -> tuple[str, str]:
        chunks = replicas.stream(ASK)
        async with contextlib.aclosing(chunks):
            await anext(chunks)  # the stream runs on the first engine
            assert replicas.held() == [1, 0]
            during = (await replicas.generate(ASK)).text
        after = (await replicas.generate(ASK)).text
        return during, after

    assert asyncio.run(run()) == ("second", "first")
    assert replicas.held() == [0, 0] and len(first.aborted) == 1


def test_an_extraction_runs_through_replicas() -> None:
    answer = '{"condition_description": "snow", "city": "Oslo"}'
    engines = [ScriptedEngine(respond=lambda _: answer) for _ in range(2)]
    extractor = Extractor(settings=Settings.from_env({"EXTRACTOR_ENGINE": "scripted"}), engine=EngineReplicas(engines))
    result = extractor.extract("snips_get_weather", "will it snow in Oslo")
    assert result.data["city"] == "Oslo"
    assert sum(len(e.history) for e in engines) == 1


def test_replicas_of_the_settings_each_take_a_share_of_the_memory() -> None:
    settings = Settings.from_env({"EXTRACTOR_ENGINE_REPLICAS": "2", "EXTRACTOR_GPU_MEMORY_UTILIZATION": "0.8"})
    replicas = create_engine(settings)
    assert isinstance(replicas, EngineReplicas) and len(replicas.engines) == 2
    for engine in replicas.engines:
        inner = engine if isinstance(engine, VLLMEngine) else engine._engine  # type: ignore[attr-defined]
        assert inner._engine_args().gpu_memory_utilization == pytest.approx(0.4)


def test_merged_adapters_with_replicas_name_the_fix() -> None:
    settings = Settings.from_env({"EXTRACTOR_ENGINE_REPLICAS": "2"})
    with pytest.raises(ConfigError, match="EXTRACTOR_ADAPTER_SERVING=lora"):
        create_engine(settings, adapters=[Path("adapters/snips")])


def test_fewer_than_one_replica_or_replicas_of_a_remote_engine_name_the_setting() -> None:
    with pytest.raises(ConfigError, match="EXTRACTOR_ENGINE_REPLICAS: 1 or more"):
        Settings.from_env({"EXTRACTOR_ENGINE_REPLICAS": "0"})
    remote = {
        "EXTRACTOR_ENGINE": "remote",
        "EXTRACTOR_REMOTE_URLS": "http://127.0.0.1:9",
        "EXTRACTOR_ENGINE_REPLICAS": "2",
    }
    with pytest.raises(ConfigError, match="EXTRACTOR_ENGINE_REPLICAS: engines in this process"):
        Settings.from_env(remote)


def test_a_dry_run_spreads_over_scripted_replicas() -> None:
    settings = Settings.from_env({"EXTRACTOR_ENGINE": "scripted", "EXTRACTOR_ENGINE_REPLICAS": "3"})
    extractor = Extractor(settings=settings)
    assert isinstance(extractor.engine, EngineReplicas) and len(extractor.engine.engines) == 3
    results = extractor.extract_many("snips_get_weather", ["will it snow in Oslo", "rain in Paris", "sun in Rome"])
    assert len(results) == 3
