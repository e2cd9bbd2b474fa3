"""Load and lifecycle runs of issue 13 (cases 14-17) against `extractor serve` on the scripted engine.

    python -m bench.experiments.lifecycle admission    # 14: admission limit + 50 concurrent clients
    python -m bench.experiments.lifecycle disconnect   # 15: 200 clients that hang up after 0.5 s
    python -m bench.experiments.lifecycle sigterm      # 16: SIGTERM under load, and during `extractor batch`
    python -m bench.experiments.lifecycle soak         # 17: 10 minutes at steady load (--minutes to change)
    python -m bench.experiments.lifecycle admission --engine vllm   # 14 on the real engine (flock it)

Each run writes ``bench/results/lifecycle_<run>.md`` and its raw figures to
``bench/results/raw/lifecycle_<run>.json``, and exits non-zero when a guarantee did not hold.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.common import RESULTS, ROOT, percentile, publish, save
from bench.service import TASK, TEXT, answer, host, post, running, start_server


def metric(text: str, name: str, **labels: str) -> float:
    """One sample of a Prometheus exposition, summed over the series that carry ``labels``."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")):
            sample, value = line.rsplit(" ", 1)
            if all(f'{k}="{v}"' in sample for k, v in labels.items()):
                total += float(value)
    return total


async def scrape(client: httpx.AsyncClient) -> str:
    return (await client.get("/metrics", timeout=30)).text


def write(run: str, checks: dict[str, bool], figures: dict[str, Any], table: Sequence[str]) -> bool:
    ok = all(checks.values())
    raw = {"run": run, "ok": ok, "checks": checks, "figures": figures, "machine": machine()}
    save(RESULTS / "raw" / f"lifecycle_{run}.json", raw)
    lines = [
        f"# lifecycle: {run}",
        "",
        f"`python -m bench.experiments.lifecycle {' '.join(sys.argv[1:])}` on {machine()}",
        "",
    ]
    lines += [*table, "", "| guarantee | held |", "|---|---|"]
    lines += [f"| {name} | {'yes' if held else '**NO**'} |" for name, held in checks.items()]
    publish("\n".join(lines) + "\n", RESULTS / f"lifecycle_{run}.md")
    return ok


def machine() -> str:
    return f"{host()}, load average " + ", ".join(f"{x:.1f}" for x in os.getloadavg())


def flags(**settings: Any) -> list[str]:
    return [f"--{k.replace('_', '-')}={v}" for k, v in settings.items()]


# -- 14: admission limit + 50 concurrent clients ---------------------------------------------


_RETRY_AFTER = re.compile(rb"retry-after: *(\S+)", re.IGNORECASE)


async def admission(url: str, *, clients: int, per_client: int) -> dict[str, Any]:
    """``clients`` keep-alive connections (a raw HTTP/1.1 client: it costs the machine little), opened
    first, then each sends ``per_client`` requests one after another; latency is write to last byte."""
    port = int(url.rsplit(":", 1)[1])
    request = post(f"/extract/{TASK}", {"text": TEXT})
    answers: list[tuple[int, float, bytes | None]] = []
    go = asyncio.Event()

    async def client() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            await go.wait()
            for _ in range(per_client):
                started = time.perf_counter()
                writer.write(request)
                head, _ = await answer(reader)
                retry = _RETRY_AFTER.search(head)
                answers.append((int(head[9:12]), time.perf_counter() - started, retry.group(1) if retry else None))
        finally:
            writer.close()

    jobs = [asyncio.create_task(client()) for _ in range(clients)]
    await asyncio.sleep(1.0)  # every connection open and idle
    started = time.perf_counter()
    go.set()
    await asyncio.gather(*jobs)
    wall = time.perf_counter() - started
    await asyncio.sleep(0.2)
    async with httpx.AsyncClient(base_url=url) as c:
        text = await scrape(c)
    ok = [s for code, s, _ in answers if code == 200]
    refused = [(s, ra) for code, s, ra in answers if code == 429]
    return {
        "requests": len(answers),
        "statuses": dict(Counter(code for code, _, _ in answers)),
        "wall_s": wall,
        "admitted_p50_ms": percentile(ok, 0.5) * 1000 if ok else None,
        "admitted_p99_ms": percentile(ok, 0.99) * 1000 if ok else None,
        "refused_p50_ms": percentile([s for s, _ in refused], 0.5) * 1000 if refused else None,
        "refused_p99_ms": percentile([s for s, _ in refused], 0.99) * 1000 if refused else None,
        "refused_max_ms": max(s for s, _ in refused) * 1000 if refused else None,
        "refused_without_retry_after": sum(1 for _, ra in refused if not ra),
        "queue_depth_after": metric(text, "extractor_queue_depth"),
        "in_flight_after": metric(text, "extractor_in_flight"),
    }


def run_admission(args: argparse.Namespace) -> bool:
    settings: dict[str, Any] = {"max_in_flight": 4, "max_queued": 8}
    if args.engine == "scripted":
        settings["scripted_delay_s"] = 0.2
    per_client = 10 if args.engine == "scripted" else 2
    with running(args.engine, extra=flags(**settings)) as (_, url):
        f = asyncio.run(admission(url, clients=50, per_client=per_client))
    statuses = f["statuses"]
    checks = {
        "every answer is 200 or 429": set(statuses) <= {200, 429},
        "no 5xx": not any(code >= 500 for code in statuses),
        "every 429 within 50 ms": f["refused_max_ms"] is None or f["refused_max_ms"] <= 50,
        "every 429 has Retry-After": f["refused_without_retry_after"] == 0,
        "the queue drains (queue depth and in flight 0 after)": f["queue_depth_after"] == 0 == f["in_flight_after"],
    }
    table = [
        f"Engine `{args.engine}`, `max_in_flight` 4, `max_queued` 8"
        + (", each generation 0.2 s" if args.engine == "scripted" else "")
        + f"; 50 clients, {per_client} requests each, one after another.",
        "",
        "| requests | 200 | 429 | other | admitted p50 / p99 ms | 429 p50 / p99 / max ms | wall s |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        f"| {f['requests']} | {statuses.get(200, 0)} | {statuses.get(429, 0)} | "
        f"{sum(n for code, n in statuses.items() if code not in (200, 429))} | "
        f"{fmt(f['admitted_p50_ms'])} / {fmt(f['admitted_p99_ms'])} | "
        f"{fmt(f['refused_p50_ms'])} / {fmt(f['refused_p99_ms'])} / {fmt(f['refused_max_ms'])} | {f['wall_s']:.1f} |",
    ]
    return write("admission" if args.engine == "scripted" else f"admission_{args.engine}", checks, f, table)


def fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


# -- 15: 200 clients that disconnect after 0.5 s ---------------------------------------------


async def disconnect(url: str, *, clients: int, hang_up_s: float, delay_s: float) -> dict[str, Any]:
    async def client() -> str:
        async with httpx.AsyncClient(base_url=url) as c:
            try:
                await c.post(f"/extract/{TASK}", json={"text": TEXT}, timeout=hang_up_s)
            except httpx.TimeoutException:
                return "hung up"
            return "answered"

    async with httpx.AsyncClient(base_url=url) as probe:
        before = await scrape(probe)

        async def while_connected() -> float:
            await asyncio.sleep(hang_up_s * 0.6)
            return metric(await scrape(probe), "extractor_in_flight")

        during = asyncio.create_task(while_connected())
        outcomes = Counter(await asyncio.gather(*(client() for _ in range(clients))))
        in_flight_during = await during
        gone = time.perf_counter()
        peak, drained_s = 0.0, None
        while time.perf_counter() - gone < 2 * delay_s:
            text = await scrape(probe)
            in_flight = metric(text, "extractor_in_flight")
            peak = max(peak, in_flight)
            if in_flight == 0:
                drained_s = time.perf_counter() - gone
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.5)
        after = await scrape(probe)
    aborted = metric(after, "extractor_requests_total", status="499") - metric(
        before, "extractor_requests_total", status="499"
    )
    return {
        "clients": clients,
        "outcomes": dict(outcomes),
        "aborted_499": aborted,
        "in_flight_while_connected": in_flight_during,
        "in_flight_when_checked": peak,
        "in_flight_zero_after_s": drained_s,
        "in_flight_end": metric(after, "extractor_in_flight"),
        "generation_s": delay_s,
    }


def run_disconnect(args: argparse.Namespace) -> bool:
    delay = 3.0
    with running("scripted", extra=flags(scripted_delay_s=delay, max_in_flight=256, max_queued=0)) as (_, url):
        f = asyncio.run(disconnect(url, clients=200, hang_up_s=0.5, delay_s=delay))
    checks = {
        "all 200 clients hung up before an answer": f["outcomes"].get("hung up", 0) == 200,
        "200 requests in flight before the hang-ups": f["in_flight_while_connected"] == 200,
        "200 engine requests aborted (499)": f["aborted_499"] == 200,
        "extractor_in_flight back to 0 well before the generations would end": f["in_flight_zero_after_s"] is not None
        and f["in_flight_zero_after_s"] < delay - 0.5,
        "extractor_in_flight 0 at the end": f["in_flight_end"] == 0,
    }
    table = [
        f"Scripted engine, each generation {delay:g} s; 200 clients at once, each hanging up after 0.5 s.",
        "",
        "| clients | in flight at 0.3 s | hung up | aborted (499) | in flight 0 after (s from the last hang-up) "
        "| in flight at end |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| 200 | {f['in_flight_while_connected']:.0f} | {f['outcomes'].get('hung up', 0)} | {f['aborted_499']:.0f} | "
        f"{fmt(f['in_flight_zero_after_s'])} | {f['in_flight_end']:.0f} |",
    ]
    return write("disconnect", checks, f, table)


# -- 16: SIGTERM under load, and during `extractor batch` ------------------------------------


async def sigterm_under_load(process: subprocess.Popen[bytes], url: str, *, clients: int) -> dict[str, Any]:
    async def in_flight(c: httpx.AsyncClient) -> int:
        return (await c.post(f"/extract/{TASK}", json={"text": TEXT}, timeout=60)).status_code

    late: list[str] = []
    marked = 0  # 503s with Retry-After and Connection: close

    def answered(response: httpx.Response, where: str = "") -> None:
        nonlocal marked
        late.append(f"{response.status_code}{where}")
        marked += (
            response.status_code == 503
            and "retry-after" in response.headers
            and (response.headers.get("connection") == "close")
        )

    async with (
        httpx.AsyncClient(base_url=url, limits=httpx.Limits(max_connections=clients)) as c,
        httpx.AsyncClient(base_url=url) as kept,
    ):
        await kept.get("/healthz")  # a keep-alive connection opened before the signal
        jobs = [asyncio.create_task(in_flight(c)) for _ in range(clients)]
        await asyncio.sleep(0.5)
        process.send_signal(signal.SIGTERM)
        signalled = time.perf_counter()
        await asyncio.sleep(0.3)
        try:  # a new request on the connection opened before the signal
            answered(await kept.post(f"/extract/{TASK}", json={"text": TEXT}, timeout=5), " (open connection)")
        except httpx.TransportError as error:
            late.append(f"{type(error).__name__} (open connection)")
        for _ in range(5):  # new requests after the signal, on new connections
            try:
                async with httpx.AsyncClient(base_url=url) as fresh:
                    answered(await fresh.post(f"/extract/{TASK}", json={"text": TEXT}, timeout=5))
            except httpx.TransportError as error:
                late.append(type(error).__name__)
        try:
            async with httpx.AsyncClient(base_url=url) as fresh:
                ready: int | str = (await fresh.get("/readyz", timeout=5)).status_code
        except httpx.TransportError as error:
            ready = type(error).__name__
        statuses = await asyncio.gather(*jobs)
        finished = time.perf_counter() - signalled
    code = await asyncio.to_thread(process.wait, 60)
    exited = time.perf_counter() - signalled
    return {
        "in_flight": clients,
        "in_flight_statuses": dict(Counter(statuses)),
        "in_flight_finished_after_s": finished,
        "new_after_signal": dict(Counter(late)),
        "new_503_with_retry_after_and_connection_close": marked,
        "readyz_while_draining": ready,
        "exit": code,
        "exited_after_s": exited,
    }


def batch_under_sigterm(workdir: Path, *, rows: int) -> dict[str, Any]:
    source, out = workdir / "in.jsonl", workdir / "out.jsonl"
    source.write_text("".join(json.dumps({"id": f"doc-{i}", "text": f"{TEXT}（{i}）"}) + "\n" for i in range(rows)))
    command = [sys.executable, "-m", "extractor.cli", "batch", TASK, str(source), str(out), "--concurrency", "8"]
    command += ["--engine", "scripted", "--scripted-delay-s", "0.05", "--home", str(workdir / "home")]
    first = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not out.exists() or out.read_bytes().count(b"\n") < rows // 4:
        if first.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the batch ended before the signal: {first.communicate()}")
        time.sleep(0.02)
    first.send_signal(signal.SIGTERM)
    signalled = time.perf_counter()
    first.communicate(timeout=60)
    stopped_s = time.perf_counter() - signalled
    data = out.read_bytes()
    partial = data.count(b"\n")
    whole_lines = data.endswith(b"\n")
    second = subprocess.run(command, cwd=ROOT, capture_output=True, timeout=300, check=False)
    records = [json.loads(line) for line in out.read_bytes().splitlines()]
    ids = Counter(r["id"] for r in records)
    return {
        "rows": rows,
        "first_exit": first.returncode,
        "first_stopped_after_s": stopped_s,
        "written_before_signal_stop": partial,
        "output_whole_lines_after_stop": whole_lines,
        "rerun_exit": second.returncode,
        "records": len(records),
        "ids_exactly_once": len(ids) == rows and set(ids.values()) == {1},
        "ok_records": sum(1 for r in records if r["ok"]),
    }


def run_sigterm(args: argparse.Namespace) -> bool:
    process, url = start_server("scripted", extra=flags(scripted_delay_s=2.0, shutdown_timeout_s=30))
    f = asyncio.run(sigterm_under_load(process, url, clients=20))
    with tempfile.TemporaryDirectory() as tmp:
        b = batch_under_sigterm(Path(tmp), rows=400)
    late = f["new_after_signal"]
    checks = {
        "in-flight requests all finish with 200": f["in_flight_statuses"] == {200: 20},
        "new requests after the signal get 503 (not a refused connection)": set(late)
        == {"503", "503 (open connection)"},
        "each 503 says Retry-After and Connection: close": f["new_503_with_retry_after_and_connection_close"] == 6,
        "/readyz 503 while draining": f["readyz_while_draining"] == 503,
        "the server exits 0 once drained": f["exit"] == 0,
        "the batch stops on SIGTERM and leaves whole lines": b["output_whole_lines_after_stop"]
        and b["written_before_signal_stop"] < b["rows"],
        "the rerun completes": b["rerun_exit"] == 0,
        "each id exactly once": b["ids_exactly_once"],
    }
    table = [
        "Server: scripted engine, each generation 2 s, 20 requests in flight when SIGTERM arrives.",
        "",
        "| in flight | their answers | finished after (s) | new requests after the signal | /readyz then | exit "
        "| exited after (s) |",
        "|---:|---|---:|---|---:|---:|---:|",
        f"| 20 | {f['in_flight_statuses']} | {f['in_flight_finished_after_s']:.2f} | {late} | "
        f"{f['readyz_while_draining']} | {f['exit']} | {f['exited_after_s']:.2f} |",
        "",
        "`extractor batch`: scripted engine, 0.05 s a generation, concurrency 8, SIGTERM once a quarter is written.",
        "",
        "| rows | exit on SIGTERM | stopped after s | written then | whole lines | rerun exit | records | ids once |",
        "|---:|---:|---:|---:|---|---:|---:|---|",
        f"| {b['rows']} | {b['first_exit']} | {b['first_stopped_after_s']:.2f} | {b['written_before_signal_stop']} | "
        f"{b['output_whole_lines_after_stop']} | {b['rerun_exit']} | {b['records']} | {b['ids_exactly_once']} |",
    ]
    return write("sigterm", checks, {"server": f, "batch": b}, table)


# -- 17: a soak at steady load ---------------------------------------------------------------


async def soak(process: subprocess.Popen[bytes], url: str, *, minutes: float, rate: float) -> dict[str, Any]:
    server = psutil.Process(process.pid)
    samples: list[dict[str, float]] = []
    statuses: Counter[str] = Counter()
    end = time.monotonic() + minutes * 60

    def sample() -> None:
        samples.append(
            {
                "t_s": minutes * 60 - (end - time.monotonic()),
                "rss_mib": server.memory_info().rss / 2**20,
                "fds": server.num_fds(),
            }
        )

    async def client(c: httpx.AsyncClient, n: int) -> None:
        kinds = ["extract", "extract", "extract", "batch", "chat"]
        i = n
        while time.monotonic() < end:
            kind = kinds[i % len(kinds)]
            i += 1
            try:
                if kind == "extract":
                    r = await c.post(f"/extract/{TASK}", json={"text": TEXT}, timeout=30)
                elif kind == "batch":
                    items = [{"id": str(k), "text": TEXT} for k in range(4)]
                    r = await c.post(f"/extract/{TASK}/batch", json={"items": items}, timeout=30)
                else:
                    r = await c.post("/chat", json={"query": "hello", "max_tokens": 16}, timeout=30)
                statuses[f"{kind} {r.status_code}"] += 1
            except httpx.HTTPError as error:
                statuses[f"{kind} {type(error).__name__}"] += 1
            await asyncio.sleep(4 / rate)

    async def sampler() -> None:
        while time.monotonic() < end:
            sample()
            await asyncio.sleep(30)
        sample()

    async with httpx.AsyncClient(base_url=url) as c:
        warm = [c.post(f"/extract/{TASK}", json={"text": TEXT}) for _ in range(20)]
        await asyncio.gather(*warm)  # first-use caches (grammar, templates) before the first sample
        await asyncio.sleep(7)  # the warm-up's extra keep-alive connections expire (5 s) before the first sample
        await asyncio.gather(sampler(), *(client(c, n) for n in range(4)))
        text = await scrape(c)
    return {
        "minutes": minutes,
        "statuses": dict(statuses),
        "samples": samples,
        "errors_5xx_metric": sum(metric(text, "extractor_requests_total", status=str(s)) for s in range(500, 600)),
    }


def run_soak(args: argparse.Namespace) -> bool:
    with running("scripted", extra=flags(scripted_delay_s=0.05)) as (process, url):
        f = asyncio.run(soak(process, url, minutes=args.minutes, rate=20.0))
    first, last = f["samples"][0], f["samples"][-1]
    rss_peak = max(s["rss_mib"] for s in f["samples"])
    errors = sum(n for key, n in f["statuses"].items() if not key.endswith(" 200"))
    checks = {
        "zero errors": errors == 0 and f["errors_5xx_metric"] == 0,
        "RSS flat (end within 10 % or 20 MiB of start)": last["rss_mib"] - first["rss_mib"]
        <= max(20.0, 0.1 * first["rss_mib"]),
        "open file descriptors flat (end at most 5 above start)": last["fds"] - first["fds"] <= 5,
    }
    requests = sum(f["statuses"].values())
    table = [
        f"Scripted engine (0.05 s a generation), 4 clients for {args.minutes:g} minutes, about 20 requests/s: "
        "extractions, batches of 4 and chats.",
        "",
        "| requests | errors | RSS start MiB | RSS end MiB | RSS peak MiB | fds start | fds end |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        f"| {requests} | {errors} | {first['rss_mib']:.1f} | {last['rss_mib']:.1f} | {rss_peak:.1f} | "
        f"{first['fds']:.0f} | {last['fds']:.0f} |",
        "",
        "By kind and status: " + ", ".join(f"{k}: {n}" for k, n in sorted(f["statuses"].items())),
        "",
        "Every 30 s, RSS MiB: " + ", ".join(f"{x['rss_mib']:.0f}" for x in f["samples"]),
        "",
        "Every 30 s, open fds: " + ", ".join(f"{x['fds']:.0f}" for x in f["samples"]),
    ]
    return write("soak", checks, f, table)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", choices=["admission", "disconnect", "sigterm", "soak"])
    parser.add_argument("--engine", choices=["scripted", "vllm"], default="scripted", help="admission only")
    parser.add_argument("--minutes", type=float, default=10.0, help="soak only")
    args = parser.parse_args(argv)
    runs = {"admission": run_admission, "disconnect": run_disconnect, "sigterm": run_sigterm, "soak": run_soak}
    return 0 if runs[args.run](args) else 1


if __name__ == "__main__":
    sys.exit(main())
