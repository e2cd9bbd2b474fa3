"""Two real `vllm serve` of the default model behind `vllm-router`: the remote engine's load, one server killed.

flock /tmp/extractor-engine.lock .venv/bin/python -m bench.experiments.remote_router [--docs 48]

Starts two OpenAI-compatible vLLM servers on 127.0.0.1 (the default model, each with a small KV
cache), and `vllm-router` (``make setup-router``) in front of them. Then, on the same load
(``--docs`` extractions of ``landmark_slots``, all submitted at once):

1. the router (``EXTRACTOR_REMOTE_URLS=router``, round robin), both servers up: docs/s, p50
   (``--single``: also one server alone, the other idle);
2. again while one server is killed (SIGKILL) after a third of the documents: how many
   extractions were answered, and the docs/s.

Results: bench/results/remote_router.md (``--gpu-memory``: remote_router_gpu.md). On 2 CPU cores the
two servers share the cores: compare the rows with each other, not with one server. The recorded CPU
table also has the client-side list of servers (``EXTRACTOR_REMOTE_URLS=a,b``), retired since: it was
made at commit 2df7941, before the list went; run there (``git worktree add``) to measure it again.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import write_table
from extractor import ExtractionResult, Extractor, Settings
from extractor.config import repo_root
from extractor.models import resolve_model_dir

TEXT = "阿尔罕布拉宫是西班牙摩尔人统治时期的宫殿建筑。"
ROUTER = repo_root() / ".venv-router" / "bin" / "vllm-router"


def _port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server(port: int, log: Path, gpu_memory: float | None = None) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(resolve_model_dir(Settings.from_env())),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "4096",
        "--max-num-seqs",
        "16" if gpu_memory is None else "256",
        "--structured-outputs-config",
        '{"backend":"guidance","disable_any_whitespace":true}',
    ]
    if gpu_memory is not None:  # a GPU host: the servers share one GPU, each this share of its memory
        command += ["--gpu-memory-utilization", str(gpu_memory)]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    with log.open("ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _router(port: int, workers: list[str], log: Path, router: Path = ROUTER) -> subprocess.Popen[bytes]:
    command = [str(router), "--host", "127.0.0.1", "--port", str(port), "--policy", "round_robin"]
    command += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(_port()), "--worker-urls", *workers]
    with log.open("ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _wait(url: str, path: str, process: subprocess.Popen[bytes], timeout_s: float = 600) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if process.poll() is not None:
            raise RuntimeError(f"{url}: exited with {process.returncode}")
        try:
            if httpx.get(url + path, timeout=2).status_code == 200:
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise TimeoutError(url)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


async def _load(urls: str, docs: int, home: Path, kill: subprocess.Popen[bytes] | None) -> dict[str, float]:
    settings = Settings.from_env(engine="remote", remote_urls=urls, home=home, remote_timeout_s=300)
    latencies: list[float] = []
    async with Extractor(settings=settings) as extractor:
        await extractor.astart()

        async def one() -> bool:
            started = time.perf_counter()
            try:
                result = await extractor.aextract("landmark_slots", TEXT)
            except Exception:  # noqa: BLE001 - any failure is an unanswered request, counted
                return False
            latencies.append(time.perf_counter() - started)
            return isinstance(result, ExtractionResult)

        started = time.perf_counter()
        calls = [asyncio.create_task(one()) for _ in range(docs)]
        if kill is not None:
            while len(latencies) < docs // 3:
                await asyncio.sleep(0.05)
            os.killpg(kill.pid, signal.SIGKILL)
        answered = sum(await asyncio.gather(*calls))
        elapsed = time.perf_counter() - started
    return {"answered": answered, "docs_per_s": answered / elapsed, "p50_s": statistics.median(latencies)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=48)
    parser.add_argument("--router", type=Path, default=ROUTER, help="the vllm-router binary")
    parser.add_argument("--gpu-memory", type=float, help="a GPU host: each server's share of the one GPU")
    parser.add_argument("--single", action="store_true", help="also the load on one server alone (both up)")
    parser.add_argument("--table", default="remote_router.md", help="the results file under bench/results")
    args = parser.parse_args()
    rows: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        ports = [_port(), _port()]
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        servers = []
        for i, p in enumerate(ports):  # on a GPU one after another: each sizes its cache from what is free
            servers.append(_server(p, folder / f"server-{i}.log", args.gpu_memory))
            if args.gpu_memory is not None:
                _wait(urls[i], "/health", servers[i])
        router_port = _port()
        router_url = f"http://127.0.0.1:{router_port}"
        router = _router(router_port, urls, folder / "router.log", args.router)
        try:
            up = max(_wait(u, "/health", s) for u, s in zip(urls, servers, strict=True))
            _wait(router_url, "/v1/models", router, timeout_s=120)
            print(f"servers up in {up:.0f} s", flush=True)
            roads = [("vllm-router", router_url)]  # the client-side list's road left with the list (2df7941)
            if args.single:  # the baseline: one server of the two, the other idle
                asyncio.run(_load(urls[1], 4, folder, None))
                measured = asyncio.run(_load(urls[1], args.docs, folder, None))
                rows.append(
                    f"| one server alone | both up, one used | {measured['answered']}/{args.docs} | "
                    f"{measured['docs_per_s']:.2f} | {measured['p50_s']:.2f} |"
                )
                print(rows[-1], flush=True)
            for name, target in roads:
                asyncio.run(_load(target, 4, folder, None))  # warm-up
                measured = asyncio.run(_load(target, args.docs, folder, None))
                rows.append(
                    f"| {name} | both up | {measured['answered']}/{args.docs} | {measured['docs_per_s']:.2f} | "
                    f"{measured['p50_s']:.2f} |"
                )
                print(rows[-1], flush=True)
            for name, target in reversed(roads):
                if servers[0].poll() is not None:  # killed by the run before: start it again
                    servers[0] = _server(ports[0], folder / "server-0.log", args.gpu_memory)
                    _wait(urls[0], "/health", servers[0])
                measured = asyncio.run(_load(target, args.docs, folder, servers[0]))
                rows.append(
                    f"| {name} | one killed after a third | **{measured['answered']}/{args.docs}** | "
                    f"{measured['docs_per_s']:.2f} | {measured['p50_s']:.2f} |"
                )
                print(rows[-1], flush=True)
        finally:
            _stop(router)
            for server in servers:
                _stop(server)
    if args.gpu_memory is not None:
        import torch

        intro = (
            f"`python -m bench.experiments.remote_router --docs {args.docs} --gpu-memory {args.gpu_memory} "
            "--single` on "
            f"{torch.cuda.get_device_name(0)} (one GPU): two `vllm serve` of the default model sharing it, "
            f"{args.gpu_memory} of its memory each, max-num-seqs 256, `vllm-router` 0.1.17 (round robin) in front; "
            "`landmark_slots`, all documents submitted at once through `Extractor` on the remote engine. Both "
            "servers share one GPU: this shows the mechanism (every request answered when one dies), not the "
            "scale of two GPUs."
        )
        header = ["road", "servers", "answered", "docs/s", "p50 s"]
        print(write_table(args.table, "The remote engine behind vllm-router, on one GPU", intro, header, rows))
        return
    intro = (
        f"`python -m bench.experiments.remote_router --docs {args.docs}` on {os.cpu_count()} CPU cores: "
        "two `vllm serve` of the "
        "default model (vllm-cpu, KV cache 1 GiB each, max-num-seqs 16) on 127.0.0.1, `vllm-router` 0.1.17 "
        "(round robin) in front; `landmark_slots`, all documents submitted at once through `Extractor` "
        "on the remote engine (`remote_retries` 2). The two servers share the same cores: compare the rows "
        "with each other, not with one server."
    )
    header = ["road", "servers", "answered", "docs/s", "p50 s"]
    print(write_table(args.table, "The remote engine: its own URL list vs vllm-router", intro, header, rows))


if __name__ == "__main__":
    main()
