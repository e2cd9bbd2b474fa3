"""The pipeline's own CPU per document: what bounds P1 on a GPU, measured on any machine.

On the H200 vLLM answers 256 SNIPS requests at once in about 2 ms a document; the service runs
its whole pipeline for each one (render, prompt tokens, the grounded grammar, parse, validate,
ground, confidences, the journal) on one thread. Whatever that thread spends per document is the
ceiling on ``extractor batch`` there, and P1 cannot pass 0.95 while it is near vLLM's own time.

Here the engine answers at once, with each line's gold answer, and does in this process what
:class:`~extractor.engines.process.ProcessEngine` does in the service's (the prompt's token ids,
the answer's token places): every other microsecond is the pipeline's. It runs ``extractor
batch`` per task on the SNIPS dev lines (no vLLM, no GPU) and prints CPU µs per document and
wall µs per document in each stage (``--profile``, cProfile's busiest functions, is in git history at bf0fea1).

    python -m bench.pipeline_cpu [--per-task 100]

The same on real documents: ``bench.kleister --record FILE`` keeps each request's answer (keyed by
a hash of the request, so the file holds no document text), and ``--replay FILE`` runs the same
contracts against :class:`ReplayEngine`, which answers each request with its recorded answer at
once and does in this process what ``ProcessEngine`` does in the service's (the prompt's token ids,
the answer's token places). The pipeline asks the same requests in the same chain (it is
deterministic given the answers); a request not recorded is counted as missed and answered ``{}``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import time
from collections import defaultdict
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any

from bench import common, compact
from extractor import Extractor
from extractor.config import Settings
from extractor.engines import memo
from extractor.engines.base import Engine, Generation, GenerationRequest, Message
from extractor.engines.local import LocalModel
from extractor.engines.memo import MemoEngine
from extractor.jobs.gold import GoldItem
from extractor.models import resolve_model_dir


class InstantEngine(LocalModel):
    """Answers each text with its gold data as compact JSON, placed token by token as the service does.

    ``spent`` sums the seconds of what the service's side of ``ProcessEngine`` does: the prompt's
    token ids (counting them, then sending them) and the answer's token places.
    """

    def __init__(self, settings: Settings, answers: dict[str, str]) -> None:
        self._settings = settings
        self._model_dir = resolve_model_dir(settings)
        self._chat_ids = None
        self._answers = answers
        self.spent: dict[str, float] = defaultdict(float)

    async def start(self) -> None:
        self._load_tokenizer()

    async def close(self) -> None:
        return None

    def prompt_ids(self, messages: Sequence[Message]) -> tuple[int, ...]:
        start = time.perf_counter()
        try:
            return super().prompt_ids(messages)
        finally:
            self.spent["prompt token ids (chat template + tokenizer)"] += time.perf_counter() - start

    async def generate(self, request: GenerationRequest) -> Generation:
        ids = self.prompt_ids(request.messages)
        text = self._answers.get(request.messages[-1]["content"], "{}")
        answer = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])  # the engine's work: not counted
        start = time.perf_counter()
        ends = self.token_ends(answer, text) if request.logprobs else ()
        self.spent["answer token places"] += time.perf_counter() - start
        logprobs = tuple(0.0 for _ in answer) if request.logprobs else ()
        return Generation(text, len(ids), len(answer), token_ends=ends, token_logprobs=logprobs)

    async def stream(self, request: GenerationRequest) -> AsyncGenerator[str, None]:
        yield (await self.generate(request)).text


def request_key(request: GenerationRequest) -> str:
    """A request's identity (:func:`extractor.engines.memo.request_key`), hashed: the file holds no text."""
    return hashlib.sha256(memo.request_key(request).encode()).hexdigest()[:32]


class RecordingEngine(MemoEngine):
    """``engine``, each answer kept under its request's key; written to ``path`` at close.

    A :class:`MemoEngine` for its delegation only: every request goes to ``engine``, as in a run without it.
    """

    def __init__(self, engine: Engine, path: Path) -> None:
        super().__init__(engine)
        self.path = path
        self.recorded: dict[str, dict[str, Any]] = {}

    async def generate(self, request: GenerationRequest) -> Generation:
        generation = await self.engine.generate(request)
        self.recorded[request_key(request)] = {
            "text": generation.text,
            "prompt_tokens": generation.prompt_tokens,
            "completion_tokens": generation.completion_tokens,
            "finish_reason": generation.finish_reason,
            "token_logprobs": list(generation.token_logprobs),
            "token_ends": list(generation.token_ends),
            "token_ids": list(generation.token_ids),
        }
        return generation

    async def close(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("".join(json.dumps({"key": k, **v}) + "\n" for k, v in self.recorded.items()))
        await super().close()


class ReplayEngine(LocalModel):
    """Answers each request with its recorded answer at once; ``missed`` counts those not recorded."""

    def __init__(self, settings: Settings, path: Path) -> None:
        self._settings = settings
        self._model_dir = resolve_model_dir(settings)
        self._chat_ids = None
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        self._answers = {line.pop("key"): line for line in lines}
        self.asked = 0
        self.missed = 0

    async def start(self) -> None:
        self._load_tokenizer()

    async def close(self) -> None:
        return None

    async def generate(self, request: GenerationRequest) -> Generation:
        self.asked += 1
        ids = self.prompt_ids(request.messages)  # as ProcessEngine makes them in the service's process
        found = self._answers.get(request_key(request))
        if found is None:
            self.missed += 1
            found = {"text": "{}", "completion_tokens": 2, "finish_reason": "stop", "token_logprobs": []}
        text = found["text"]
        logprobs = tuple(found.get("token_logprobs", ())) if request.logprobs else ()
        ends = tuple(found.get("token_ends", ()))
        if logprobs:  # the answer's token places from its ids, as the service's process does them
            answer = found.get("token_ids") or list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            if len(answer) == len(logprobs):
                ends = self.token_ends(answer, text)
        return Generation(
            text,
            len(ids),
            int(found["completion_tokens"]),
            finish_reason=found["finish_reason"],
            token_ends=ends,
            token_logprobs=logprobs,
        )


def answers(extractor: Extractor, items: Sequence[GoldItem]) -> dict[str, str]:
    """Each line's gold data as the model would write it, keyed by the user turn the pipeline renders."""
    from extractor.catalog.prompting import render

    found = {}
    for item in items:
        task = extractor.task(item.task)
        user = render(task, item.text)[-1]["content"]
        found[user] = json.dumps(shaped(task.schema, item.expected), ensure_ascii=False, separators=(",", ":"))
    return found


def shaped(schema: dict[str, Any], expected: dict[str, Any]) -> dict[str, Any]:
    """Gold slots (a list of values each) as the task schema holds them: a string field takes the first."""
    properties = schema.get("properties", {})
    out = {}
    for key, values in expected.items():
        kind = properties.get(key, {}).get("type")
        many = kind == "array" or (isinstance(kind, list) and "array" in kind)
        out[key] = values if many or not isinstance(values, list) else values[0]
    return out


async def main(per_task: int) -> dict[str, Any]:
    settings = common.settings()
    probe = Extractor(settings=settings)
    items = common.gold_items(probe.catalog.names())
    tasks = sorted({i.task for i in items})
    work = common.jobs(items, tasks, per_task)
    engine = InstantEngine(settings, answers(probe, work))
    extractor = Extractor(settings=settings, engine=engine)
    await extractor.astart()
    await compact.extractor_batches(extractor, work)  # warm: retrieval indexes, templates, caches
    engine.forget_prompts()
    cpu, wall = time.process_time(), time.perf_counter()
    summary = await compact.extractor_batches(extractor, work)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    docs = summary["docs"]
    engine.spent.clear()
    engine.forget_prompts()
    with common.stage_times(engine) as spent:
        await compact.extractor_batches(extractor, work)
    spent.pop("generate (engine, overlapping)", None)
    parts = {**spent, **engine.spent}
    per_doc = {k: v / docs * 1e6 for k, v in sorted(parts.items(), key=lambda kv: -kv[1])}
    print(f"bench: {docs} documents, {summary['ok']} ok: {cpu / docs * 1e6:.0f} µs CPU a document, {wall:.2f} s")
    for stage, us in per_doc.items():
        print(f"{us:8.0f} µs  {stage}")
    return {"docs": docs, "cpu_us_per_doc": cpu / docs * 1e6, "wall_s": wall, "stages_us_per_doc": per_doc}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-task", type=int, default=100)
    args = parser.parse_args()
    asyncio.run(main(args.per_task))
