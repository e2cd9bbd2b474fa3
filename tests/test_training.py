"""Task adapters: the training set, a short real training run, the manifest's checks, serving."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from extractor import Catalog, Extractor, ScriptedEngine, Settings
from extractor.adapters import manifest
from extractor.catalog.prompting import render
from extractor.config import repo_root
from extractor.models import resolve_model_dir
from extractor.training import data, trainer

TASK = "snips_get_weather"


def catalog_copy(root: Path, pool_lines: list[str] | None = None) -> Path:
    """A catalog holding the shipped weather task (its pool cut to the given lines, if any)."""
    source = repo_root()
    for folder, suffix in (("schemas", ".json"), ("prompts", ".j2"), ("examples", ".jsonl")):
        (root / folder).mkdir(parents=True, exist_ok=True)
        shutil.copy(source / folder / f"{TASK}{suffix}", root / folder / f"{TASK}{suffix}")
    if pool_lines is not None:
        (root / "examples" / f"{TASK}.jsonl").write_text("\n".join(pool_lines) + "\n", encoding="utf-8")
    schema = root / "schemas" / f"{TASK}.json"  # the shipped adapter stays behind: adapters/<task>/ is the test's
    data = json.loads(schema.read_text(encoding="utf-8"))
    del data["x-extractor"]["adapter"]
    schema.write_text(json.dumps(data), encoding="utf-8")
    return root


def pool_head(n: int) -> list[str]:
    return (repo_root() / "examples" / f"{TASK}.jsonl").read_text(encoding="utf-8").splitlines()[:n]


def test_samples_render_like_the_pipeline_and_refuse_bad_lines_by_number(tmp_path: Path) -> None:
    good = pool_head(3)
    bad_schema = json.dumps({"text": "rain in Oslo", "output": {"city": 7}})
    not_in_text = json.dumps({"text": "rain in Oslo", "output": {"city": "Paris"}})
    root = catalog_copy(tmp_path, [*good, bad_schema, not_in_text, "{broken"])
    task = Catalog.load(root).get(TASK)
    first = json.loads(good[0])
    kept, refused = data.samples(task, exclude={json.loads(good[1])["text"]})
    assert [s.line for s in kept] == [1, 3]
    assert [(r.line, r.reason.split(":")[0]) for r in refused] == [
        (2, "the text is in the evaluation's gold file"),
        (4, "/output/city"),
        (5, "/output/city"),
        (6, "invalid JSON or UTF-8"),
    ]
    # The chat is the pipeline's own rendering of the task without worked examples.
    assert list(kept[0].messages) == render(data.bare(task), first["text"])
    assert len(kept[0].messages) == 2 and json.loads(kept[0].answer) == first["output"]
    assert data.split(kept * 10, held_out=0.1, seed=0) == data.split(kept * 10, held_out=0.1, seed=0)


@pytest.fixture(scope="module")
def adapter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, trainer.TrainReport]]:
    """A few real training steps on 8 pool lines of the weather task (seconds on 2 cores)."""
    root = catalog_copy(tmp_path_factory.mktemp("catalog"), pool_head(8))
    task = Catalog.load(root).get(TASK)
    kept, _ = data.samples(task)
    out = root / "adapters" / TASK
    config = trainer.TrainConfig(epochs=4, rank=8, alpha=16, learning_rate=2e-3, batch_size=4, save_every=3)
    model_dir = resolve_model_dir(Settings.from_env())
    report = trainer.train(model_dir, kept, kept[:2], out, config, progress=lambda line: None)
    manifest.write(out, model_dir=model_dir, tasks=[task], data_hash=data.digest(kept), config={}, metrics={})
    yield out, report


def test_a_short_training_run_lowers_the_loss_and_writes_a_servable_adapter(
    adapter: tuple[Path, trainer.TrainReport],
) -> None:
    out, report = adapter
    assert report.steps == 8 and report.examples == 32
    assert report.first_loss is not None and report.losses[-1] < report.first_loss
    assert (out / "adapter_model.safetensors").is_file() and manifest.adapter_rank(out) == 8
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["bias"] == "none" and not config.get("use_dora") and not config.get("modules_to_save")


def test_the_catalog_serves_a_task_with_its_adapter_and_no_examples(
    adapter: tuple[Path, trainer.TrainReport], tmp_path: Path
) -> None:
    out, _ = adapter
    catalog = Catalog.load(out.parent.parent)
    task = catalog.get(TASK)
    assert task.adapter == out
    engine = ScriptedEngine(['{"city":"Oslo"}'] * 2)
    settings = Settings.from_env({}, home=tmp_path, engine="scripted")
    lora = Extractor(settings=settings.with_(adapter_serving="lora"), engine=engine, catalog=catalog)
    assert lora.settings.max_lora_rank == 8  # LoRA turned on, sized to the catalog's adapters
    assert Extractor(settings=settings, engine=engine, catalog=catalog).settings.max_lora_rank == 0  # merged
    lora.extract(TASK, "will it rain in Oslo")
    sent = engine.history[0]
    assert sent.adapter == str(out) and len(sent.messages) == 2  # system + request: no worked examples
    # "off": the base model, shown the task's worked examples as if it had no adapter.
    off = Extractor(settings=settings.with_(adapter_serving="off"), engine=engine, catalog=catalog)
    off.extract(TASK, "will it rain in Oslo")
    sent = engine.history[1]
    assert sent.adapter is None and any("Example" in m["content"] or len(m["content"]) > 400 for m in sent.messages)


def test_the_manifest_refuses_another_template_version_or_base_model(
    adapter: tuple[Path, trainer.TrainReport], tmp_path: Path
) -> None:
    out, _ = adapter
    root = out.parent.parent
    prompt = root / "prompts" / f"{TASK}.j2"
    original = prompt.read_text(encoding="utf-8")
    try:
        prompt.write_text(original + "\nBe brief.", encoding="utf-8")
        catalog = Catalog.load(root)
        assert TASK not in catalog.names()
        (error,) = catalog.errors
        assert "trained on another version of task" in str(error) and f"extractor train {TASK}" in str(error)
    finally:
        prompt.write_text(original, encoding="utf-8")
    other = tmp_path / "other-model"
    other.mkdir()
    (other / "config.json").write_text("{}", encoding="utf-8")
    with pytest.raises(manifest.AdapterError, match="trained on base model"):
        manifest.check_model(out, other)
    with pytest.raises(manifest.AdapterError, match="not an extractor adapter"):
        manifest.check_model(tmp_path, other)


@pytest.mark.engine
def test_the_real_engine_generates_valid_output_with_the_adapter(adapter: tuple[Path, trainer.TrainReport]) -> None:
    out, _ = adapter
    # Through vLLM's per-request LoRA; the shipped SNIPS adapter exercises the merged serving (real_extractor).
    settings = Settings.from_env(
        engine="vllm", max_num_seqs=4, kv_cache_space_gib=1, tasks_dir=out.parent.parent, adapter_serving="lora"
    )
    with Extractor(settings=settings) as extractor:
        assert extractor.settings.max_lora_rank == 8
        result = extractor.extract(TASK, "will it be windy in Brookhaven next weekend")
        assert result.attempts and not list(extractor.task(TASK).validator.iter_errors(result.data))


def test_a_merged_model_answers_like_base_plus_adapter_and_serves_it_without_lora(
    adapter: tuple[Path, trainer.TrainReport], tmp_path: Path
) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from extractor.adapters.merge import holds, merge

    out, _ = adapter
    base_dir = resolve_model_dir(Settings.from_env())
    merged_dir = merge(base_dir, out, tmp_path / "merged")
    ids = torch.tensor([[1, 422, 3012, 314, 3346, 30, 2]])
    with torch.no_grad():
        base = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
        expected = PeftModel.from_pretrained(base, str(out))(input_ids=ids).logits
        got = AutoModelForCausalLM.from_pretrained(str(merged_dir), dtype=torch.float32)(input_ids=ids).logits
    assert torch.allclose(expected, got, atol=1e-3)
    assert (merged_dir / "tokenizer.json").is_file() and not holds(base_dir, out)
    assert holds(merged_dir, out)
    # The catalog's task points at the adapter; on its merged model the engine needs no LoRA.
    settings = Settings.from_env(engine="vllm", model=str(merged_dir), tasks_dir=out.parent.parent)
    assert Extractor(settings=settings).settings.max_lora_rank == 0
    assert Extractor(settings=settings)._merged_adapters() == []  # the model holds it already
    lora = settings.with_(model="default", adapter_serving="lora")
    assert Extractor(settings=lora).settings.max_lora_rank == 8
    # By default the base model's engine keeps LoRA off and the adapter gets a merged engine of its own.
    default = Extractor(settings=settings.with_(model="default"))
    assert default.settings.max_lora_rank == 0 and default._merged_adapters() == [out]
    # Another adapter (other training data) on a merged model is refused, naming the merge.
    other = tmp_path / "other-adapter"
    shutil.copytree(out, other)
    record = json.loads((other / manifest.MANIFEST).read_text(encoding="utf-8"))
    (other / manifest.MANIFEST).write_text(json.dumps({**record, "data_sha256": "0" * 64}), encoding="utf-8")
    with pytest.raises(manifest.AdapterError, match="is a merge of another adapter"):
        holds(merged_dir, other)


def test_bf16_autocast_only_where_the_device_computes_bf16() -> None:
    """A CPU without bf16 instructions trains in fp32: its bf16 GEMM is a slow reference path."""
    from types import SimpleNamespace

    def probe(supported: bool) -> Any:
        return SimpleNamespace(ops=SimpleNamespace(mkldnn=SimpleNamespace(_is_mkldnn_bf16_supported=lambda: supported)))

    assert trainer.bf16_pays(probe(False), "cuda")
    assert trainer.bf16_pays(probe(True), "cpu") and not trainer.bf16_pays(probe(False), "cpu")
    assert not trainer.bf16_pays(SimpleNamespace(ops=SimpleNamespace()), "cpu")  # no probe: fp32
