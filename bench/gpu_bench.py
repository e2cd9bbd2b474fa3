"""The GPU benchmarks (issue: extractor on one H200), on 7B-class dummy weights. See bench/gpu/README.md.

    python -m bench.gpu_bench model /tmp/dummy7b        # Qwen2.5-7B dimensions, the default model's tokenizer
    EXTRACTOR_MODEL=/tmp/dummy7b EXTRACTOR_LOAD_FORMAT=dummy \\
        python -m bench.gpu_bench engine --out gpu-engine.json   # P1, grounded on/off, latency, P2
    EXTRACTOR_MODEL=/tmp/dummy7b EXTRACTOR_LOAD_FORMAT=dummy \\
        python -m bench.gpu_bench serve --out gpu-serve.json     # time to first result, GPU memory

The page, from the raw files: ``python -m bench.gpu_report`` (``bench/results/gpu.md`` and ``gpu.png``).

The engine phase runs every comparison on one engine in one process, so each ratio compares two
sides of the same run. Random weights generate noise (strings run until a grammar or ``max_tokens``
stops them): compare ratios, not absolute quality. Each part is saved as soon as it is done, so a
run cut short keeps what it measured. P5 (constrained vs free text of the same answers) is
``bench.mask_fill``'s; this module's ``p5`` part (free text cut at the answers' mean, the method until
2026-12-04) is removed (in git history at ffef660).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from bench import common, compact, grounded_grammar
from bench.common import free_port, percentile
from bench.service import start_server, stop
from extractor import Extractor, Settings
from extractor.engines.base import GenerationRequest
from extractor.jobs.gold import GoldItem
from extractor.vllm_plugins import masks as vllm_masks

# Qwen2.5-7B-Instruct's dimensions (its config.json), with the default model's tokenizer and vocabulary.
QWEN25_7B = Path(__file__).resolve().parent / "gpu" / "qwen2.5-7b.json"
CLIENTS = (1, 16, 256)
LENGTH_DOCS = {20: 192, 170: 128, 300: 96, 1000: 48}


def make_model(folder: Path) -> None:
    """A model folder vLLM loads with ``load_format="dummy"``: the config and the default model's tokenizer."""
    from transformers import AutoTokenizer

    from extractor.models import resolve_model_dir

    source = resolve_model_dir(Settings.from_env(model="default"))
    folder.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():  # the tokenizer, its chat template, the generation config: all but weights
        if path.is_file() and path.suffix not in (".safetensors", ".bin", ".gguf") and path.name != "config.json":
            shutil.copy(path, folder / path.name)
    tokenizer = AutoTokenizer.from_pretrained(source)
    config = dict(json.loads(QWEN25_7B.read_text(encoding="utf-8")), vocab_size=len(tokenizer))
    config["bos_token_id"], config["eos_token_id"] = tokenizer.bos_token_id, tokenizer.eos_token_id
    (folder / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    print(f"{folder}: Qwen2.5-7B dimensions, vocab_size {config['vocab_size']} (the default model's tokenizer)")


def gpu_memory() -> dict[str, Any]:
    """``nvidia-smi``'s view: the GPU's memory in use and each process's share (MiB)."""

    def query(args: list[str]) -> list[list[str]]:
        try:
            out = subprocess.run(["nvidia-smi", *args, "--format=csv,noheader,nounits"], capture_output=True, text=True)
        except OSError:
            return []
        return [[c.strip() for c in line.split(",")] for line in out.stdout.splitlines() if line.strip()]

    total = query(["--query-gpu=memory.used,memory.total"])
    return {
        "used_mib": int(total[0][0]) if total else None,
        "total_mib": int(total[0][1]) if total else None,
        "processes": [
            {"pid": p[0], "name": p[1], "used_mib": p[2]}
            for p in query(["--query-compute-apps=pid,process_name,used_memory"])
        ],
    }


class Report:
    """The phase's JSON file, rewritten after each part."""

    def __init__(self, path: Path) -> None:
        self.path, self.data = path, {}

    def __setitem__(self, key: str, value: Any) -> None:
        self.data[key] = value
        common.save(self.path, self.data)
        print(f"bench: {key} done", flush=True)


@contextmanager
def live_app(extractor: Extractor) -> Iterator[str]:
    """The HTTP service on ``extractor``'s engine, in a thread of this process."""
    import uvicorn

    from extractor.server.app import create_app

    server = uvicorn.Server(
        uvicorn.Config(create_app(extractor), host="127.0.0.1", port=free_port(), log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def load(url: str, clients: int, jobs: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """``clients`` at once POST ``/extract/<task>`` for each job in another process: docs/s, latency."""
    spec = json.dumps({"url": url, "clients": clients, "jobs": list(jobs)})
    done = subprocess.run(
        [sys.executable, "-m", "bench.gpu_bench", "load"], input=spec, capture_output=True, text=True, cwd=common.ROOT
    )
    if done.returncode != 0:
        raise RuntimeError(f"load generator failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


async def _load(spec: dict[str, Any]) -> dict[str, Any]:
    """The load generator: aiohttp, one session with a connection per client.

    Not httpx: with one shared ``httpx.AsyncClient`` (httpcore's pool), 256 concurrent requests to an
    endpoint that only sleeps 1 s took 4.7-7.2 s on 2 cores; aiohttp took 1.1-1.2 s, raw asyncio
    sockets 1.1 s. The old generator put that pool's queueing into P1 over HTTP (0.52).
    """
    import aiohttp

    jobs = list(spec["jobs"])
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    connector = aiohttp.TCPConnector(limit=spec["clients"])
    async with aiohttp.ClientSession(
        base_url=spec["url"], connector=connector, timeout=aiohttp.ClientTimeout(total=600)
    ) as session:

        async def worker() -> None:
            while jobs:
                task, text = jobs.pop()
                t0 = time.perf_counter()
                try:
                    async with session.post(f"/extract/{task}", json={"text": text}) as response:
                        await response.read()
                        status = str(response.status)
                except aiohttp.ClientError as error:  # counted, not fatal: the table says how many
                    status = type(error).__name__
                latencies.append(time.perf_counter() - t0)
                statuses[status] = statuses.get(status, 0) + 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(spec["clients"])))
        seconds = time.perf_counter() - started
    return {
        "clients": spec["clients"],
        "docs": len(latencies),
        "seconds": seconds,
        "docs_per_s": len(latencies) / seconds,
        "p50_s": percentile(latencies, 0.5),
        "p99_s": percentile(latencies, 0.99),
        "statuses": statuses,
    }


async def engine_phase(out: Path, per_task: int, seed_per_task: int, parts: Sequence[str]) -> None:
    report = Report(out)
    extractor, items, start_s = await common.started()
    settings = extractor.settings
    report["start"] = {
        "engine_start_s": start_s,
        "machine": common.machine(),
        "model": str(settings.model),
        "load_format": settings.load_format,
        "speculative_tokens": settings.speculative_tokens,
        "mask_threads": vllm_masks.threads(),
        "engine": type(extractor.engine).__name__,  # ProcessEngine: vLLM's front end in a process of its own
        "switch_interval_s": sys.getswitchinterval(),
        "temperature": settings.temperature,
        "vllm_args": settings.engine_arguments,  # EXTRACTOR_VLLM_ARGS: the lever a run tried
        "concurrency": common.CONCURRENCY,
        "gpu_memory": gpu_memory(),
    }
    engine = extractor.engine
    tasks = sorted({i.task for i in items})
    work = common.jobs(items, tasks, per_task)
    try:
        warm = common.jobs(items, tasks, 4)
        if settings.grammar_backend == "guidance":  # the substring grammar is llguidance's Lark
            await compact.raw_passes(engine, extractor, warm, grounded=True)
        await compact.raw_passes(engine, extractor, warm)
        await compact.extractor_batches(extractor, warm)  # the pipeline's side warm too: indexes, templates, caches
        if "p1" in parts:
            await p1(report, extractor, work)
        scripted = settings.engine == "scripted"  # a dry run: no tokenizer to compile grammars with
        report["grounded_by_length"] = (
            {}
            if "grounded" not in parts
            else {
                "compile": [] if scripted else grounded_grammar.compile_ms(extractor, tuple(LENGTH_DOCS)),
                "throughput": await grounded_grammar.throughput(extractor, LENGTH_DOCS),
            }
        )
        if "p1http" in parts:
            report["p1_http"] = await p1_http(extractor, work, profile=out.with_name("pyspy-http.txt"))
        if "http" in parts:
            with live_app(extractor) as url:
                jobs = [(i.task, i.text) for i in work]
                await asyncio.to_thread(load, url, 16, jobs[:64])  # warm-up
                sizes = {1: 16, 16: 160}  # requests per client count (256 clients: every document)
                report["http"] = [
                    await asyncio.to_thread(load, url, c, jobs[: sizes.get(c, len(jobs))]) for c in CLIENTS
                ]
        if "p2" in parts:
            report["p2"] = await compact.versus_seed(engine, extractor, common.jobs(items, tasks, seed_per_task))
    finally:
        await extractor.aclose()


async def p1(report: Report, extractor: Extractor, work: list[GoldItem]) -> None:
    """P1 as on the CPU (`bench/compact.py`: same work on both sides, A-B-B-A), plus one attempt only."""
    engine = extractor.engine
    # Every pass meets vLLM's prefix cache alike: warm for these prompts (else the first pass alone
    # pays their prefill), and tokenizes its own prompts (else the first pass alone pays that).
    await compact.raw_passes(engine, extractor, work)
    new_pass = partial(forget_prompts, engine)

    async def logprobs() -> dict[str, Any]:
        new_pass()
        return await compact.raw_passes(engine, extractor, work, grounded=True, transform=asking_logprobs)

    same_work = await compact.p1_same_work(extractor, work, new_pass=new_pass)
    new_pass()
    report["p1"] = {
        **same_work,
        "extractor_one_attempt": await compact.extractor_batches(extractor, work, max_attempts=1),
        # raw vLLM asked for the sampled tokens' logprobs, as the pipeline asks (confidences): their cost in vLLM
        "raw_logprobs": compact.add_passes(await logprobs(), await logprobs()),
    }


def forget_prompts(engine: Any) -> None:
    """Drop the prompt ids the engine remembers, so that the next pass tokenizes its prompts as new ones."""
    forget = getattr(engine, "forget_prompts", None)
    if forget is not None:
        forget()


def thread_cpu() -> dict[str, float]:
    """CPU seconds (user + system) per thread name of this process, from /proc (Linux)."""
    ticks = os.sysconf("SC_CLK_TCK")
    names = {t.native_id: t.name for t in threading.enumerate()}  # Python's names; the OS's for the others
    spent: dict[str, float] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            name = names.get(int(task.name)) or (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended
            continue
        spent[name] = spent.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
    return spent


def cpu_since(before: dict[str, float], seconds: float) -> dict[str, float]:
    """Each thread's share of one core since ``before`` (1.0: a core busy all along), the busiest first."""
    now = thread_cpu()
    used = {k: (v - before.get(k, 0.0)) / seconds for k, v in now.items()}
    return dict(sorted(((k, round(v, 3)) for k, v in used.items() if v >= 0.01), key=lambda kv: -kv[1]))


SPY_RATE = 100  # py-spy's samples a second


@contextmanager
def profiled(out: Path | None, *, subprocesses: bool = False, idle: bool = False) -> Iterator[None]:
    """py-spy samples this process (all threads, native ids; its children too with ``subprocesses``, vLLM's
    engine core among them) into ``out`` while the block runs; off if None. ``idle``: a thread blocked in a
    wait is sampled too (py-spy's ``--idle``), so the frames it waits in show."""
    spy = shutil.which("py-spy")
    if out is None or spy is None:
        yield
        return
    import ctypes
    import signal

    # Yama's ptrace_scope 1 lets only an ancestor trace: allow any process of ours to (PR_SET_PTRACER_ANY).
    ctypes.CDLL(None).prctl(0x59616D61, ctypes.c_ulong(-1 & 0xFFFFFFFFFFFFFFFF), 0, 0, 0)
    command = [spy, "record", "--pid", str(os.getpid()), "--rate", str(SPY_RATE), "--threads", "--format", "raw"]
    command += ["--subprocesses"] if subprocesses else []
    command += ["--idle"] if idle else []
    spying = subprocess.Popen([*command, "--output", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # attached
    try:
        yield
    finally:
        spying.send_signal(signal.SIGINT)
        try:
            _, errors = spying.communicate(timeout=60)
            print(f"bench: py-spy: {errors.decode(errors='replace')[-300:]}", flush=True)
        except subprocess.TimeoutExpired:
            spying.kill()


async def p1_http(extractor: Extractor, work: list[GoldItem], profile: Path) -> dict[str, Any]:
    """P1 through ``POST /extract``: 256 clients vs raw vLLM on the same documents, all tasks mixed, A-B-B-A.

    Raw: every request (the pipeline's first attempt, grounded) through the engine, 256 at once, all
    tasks mixed as the clients send them. HTTP: the service on the same engine (uvicorn in a thread of
    this process), the load generator in another process. Each pass records each thread's share of a
    core in this process, to show where the front's time goes.
    """
    engine, clients = extractor.engine, 256
    requests = [common.request(extractor.task(i.task), i.text, grounded=True) for i in work]
    jobs = [(i.task, i.text) for i in work]
    sides: dict[str, list[dict[str, Any]]] = {"raw": [], "http": [], "http_profiled": []}
    with live_app(extractor) as url:
        await asyncio.to_thread(load, url, 16, jobs[:64])  # warm-up of the HTTP path

        async def raw() -> None:
            forget_prompts(engine)
            before = thread_cpu()
            generations, seconds = await common.generate_all(engine, requests, concurrency=clients)
            tokens = sum(g.completion_tokens for g in generations)
            sides["raw"].append(
                {"docs": len(generations), "seconds": seconds, "tokens": tokens, "cpu": cpu_since(before, seconds)}
            )

        async def http(spy: Path | None = None) -> None:
            forget_prompts(engine)
            before = thread_cpu()
            with profiled(spy):
                row = await asyncio.to_thread(load, url, clients, jobs)
            sides["http" if spy is None else "http_profiled"].append({**row, "cpu": cpu_since(before, row["seconds"])})

        await raw()
        await http()
        await http()
        await raw()
        await http(profile)  # one more pass under the profiler, outside the figures
    docs_s = {k: sum(r["docs"] for r in v) / sum(r["seconds"] for r in v) for k, v in sides.items() if v}
    print(f"bench: P1 over HTTP: {docs_s['http']:.1f} vs raw {docs_s['raw']:.1f} docs/s", flush=True)
    return {"clients": clients, "docs_per_s": docs_s, "ratio": docs_s["http"] / docs_s["raw"], "passes": sides}


def asking_logprobs(r: GenerationRequest) -> GenerationRequest:
    """The request asking for each sampled token's logprob, as the pipeline's do (confidences)."""
    return dataclasses.replace(r, logprobs=True)


def serve_phase(out: Path) -> None:
    """`extractor serve` from a cold start: seconds to the first extraction, GPU memory, the engine's own figures."""
    import httpx

    report = Report(out)
    log = out.with_suffix(".log")
    started = time.perf_counter()
    process, url = start_server(common.settings().engine, log=log)
    ready = time.perf_counter() - started
    try:
        body = {"text": "will it snow in Oslo tomorrow"}
        while httpx.post(f"{url}/extract/snips_get_weather", json=body, timeout=120).status_code != 200:
            time.sleep(0.25)
        first = time.perf_counter() - started
        lines = [
            ln
            for ln in log.read_text(errors="replace").splitlines()
            if any(k in ln for k in ("Model loading took", "KV cache", "init engine", "torch.compile", "Graph"))
        ]
        report["serve"] = {"ready_s": ready, "first_result_s": first, "gpu_memory": gpu_memory(), "engine_log": lines}
    finally:
        stop(process)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("model").add_argument("folder", type=Path)
    engine = sub.add_parser("engine")
    engine.add_argument("--out", type=Path, required=True)
    engine.add_argument("--per-task", type=int, default=100, help="SNIPS dev lines per intent (100: all 700)")
    engine.add_argument("--seed-per-task", type=int, default=2)
    engine.add_argument("--parts", default="p1,grounded,http,p2", help="comma-separated, of p1,p1http,grounded,http,p2")
    sub.add_parser("serve").add_argument("--out", type=Path, required=True)
    sub.add_parser("load")
    args = parser.parse_args()
    if args.command == "model":
        make_model(args.folder)
    elif args.command == "engine":
        asyncio.run(engine_phase(args.out, args.per_task, args.seed_per_task, args.parts.split(",")))
    elif args.command == "serve":
        serve_phase(args.out)
    else:
        print(json.dumps(asyncio.run(_load(json.loads(sys.stdin.read())))))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
