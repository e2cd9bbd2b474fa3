"""Documents in (issue 24): conversion pages/s, end-to-end documents/s, and the bad-document table.

    python -m bench.experiments.documents                    # conversion + scripted end to end (~1 min)
    python -m bench.experiments.documents --engine vllm      # + the real engine on two-page PDFs (start ~1-3 min)

Documents are built here as the tests build them: PDFs printed from HTML by Debian's Chromium
(Chinese and English paragraphs), DOCX written by python-docx. Results: ``bench/results/documents.md``
and ``documents.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import RESULTS, publish
from bench.kleister import stage_table
from extractor import Extractor, ScriptedEngine, Settings, documents
from extractor.documents.pdf import render_page
from extractor.errors import ExtractorError
from extractor.pipeline import Options
from extractor.server.errors import error_body
from tests.conftest import landmark
from tests.documents import LANDMARK_TEXT, PERIOD, docx_bytes, landmark_pages, printer
from tests.test_documents_bad import cases

PARAGRAPH_EN = (
    "The Alhambra is a palace and fortress complex located in Granada, Andalusia, Spain. It was built "
    "mainly between 1238 and 1358, during the Nasrid dynasty, the last Muslim dynasty in Spain."
)
PARAGRAPH_ZH = (
    "阿尔罕布拉宫是西班牙摩尔人统治时期的宫殿建筑，位于格拉纳达，建于十三至十四世纪，是伊斯兰建筑艺术的杰作。"
)


_MEMORY = """
import sys, psutil
from extractor import documents
data = sys.stdin.buffer.read()
before = psutil.Process().memory_info().rss
document = documents.read(data)
print(before / 2**20, psutil.Process().memory_info().rss / 2**20)
"""


def memory_mib(pdf: bytes) -> tuple[float, float]:
    """RSS of a fresh process before and after converting ``pdf``, the document held (PDFium's memory included)."""
    done = subprocess.run([sys.executable, "-c", _MEMORY], input=pdf, capture_output=True, check=True)
    before, after = map(float, done.stdout.split())
    return round(before, 1), round(after, 1)


def long_pdf(chromium: Any, pages: int) -> bytes:
    """``pages`` full pages, alternating English and Chinese paragraphs (about 1,300 characters a page)."""
    body = "".join(f"<p>{PARAGRAPH_EN}</p><p>{PARAGRAPH_ZH}</p>" for _ in range(5))
    return bytes(chromium.print_pages([body] * pages).pdf)


def conversion(pdf: bytes, pages: int, docx: bytes, html: bytes) -> dict[str, Any]:
    started = time.perf_counter()
    document = documents.read(pdf)
    seconds = time.perf_counter() - started
    assert len(document.pages) == pages
    located = time.perf_counter()
    spans = 0
    for at in range(0, len(document.text) - 20, max(1, len(document.text) // 2000)):
        document.locate(at, at + 20)
        spans += 1
    locate_us = (time.perf_counter() - located) / spans * 1e6
    rendered = time.perf_counter()
    image = render_page(pdf, page=pages // 2, limits=documents.Limits())
    render_s = time.perf_counter() - rendered
    out = {
        "pdf_pages": pages,
        "pdf_bytes": len(pdf),
        "pdf_chars": len(document.text),
        "pdf_seconds": round(seconds, 3),
        "pdf_pages_per_s": round(pages / seconds, 1),
        "pdf_rss_mib": memory_mib(pdf),
        "locate_us_per_span": round(locate_us, 1),
        "render_page_s": round(render_s, 3),
        "render_png_bytes": len(image),
    }
    for name, data in (("docx", docx), ("html", html)):
        started = time.perf_counter()
        runs = 20
        for _ in range(runs):
            converted = documents.read(data, media_type="text/html" if name == "html" else None)
        seconds = (time.perf_counter() - started) / runs
        out[f"{name}_chars"] = len(converted.text)
        out[f"{name}_seconds"] = round(seconds, 4)
    return out


async def end_to_end(extractor: Extractor, sources: list[bytes], *, options: Options) -> dict[str, Any]:
    started = time.perf_counter()
    results = await asyncio.gather(
        *(extractor.aextract_document("landmark_slots", data, options=options) for data in sources),
        return_exceptions=True,
    )
    seconds = time.perf_counter() - started
    if len(sources) == 1:  # the long document: its chunks, each one engine request (and re-asks)
        one = results[0]
        chunks = len(one.chunks) if not isinstance(one, BaseException) else 0
        return {"docs": 1, "seconds": round(seconds, 2), "ok": not isinstance(one, BaseException), "chunks": chunks}
    right = sum(
        1
        for r in results
        if not isinstance(r, BaseException)
        and r.data.get("period") == PERIOD
        and any(s.path == "/period" and s.location and s.location.pages == [2] for s in r.spans)
    )
    return {
        "docs": len(sources),
        "seconds": round(seconds, 2),
        "docs_per_s": round(len(sources) / seconds, 2),
        "right": right,
    }


def bad_table(chromium: Any) -> list[dict[str, Any]]:
    rows = []
    for label, build, media_type, _, _ in cases(chromium):
        data = build()
        started = time.perf_counter()
        try:
            documents.read(data, media_type=media_type)
        except ExtractorError as error:
            status, body = error_body(error)
            rows.append(
                {
                    "input": label,
                    "bytes": len(data),
                    "status": status,
                    "code": body.error,
                    "message": body.message,
                    "ms": round((time.perf_counter() - started) * 1000, 1),
                }
            )
    return rows


def markdown(report: dict[str, Any]) -> str:
    c = report["conversion"]
    lines = [
        "# Documents in: conversion, end to end, bad documents",
        "",
        f"Machine: {report['machine']}; `python -m bench.experiments.documents{report['args']}`.",
        "",
        "| measure | value |",
        "| --- | --- |",
        f"| PDF, {c['pdf_pages']} pages ({c['pdf_bytes']} bytes, {c['pdf_chars']} chars) | {c['pdf_seconds']} s, "
        f"**{c['pdf_pages_per_s']} pages/s** |",
        f"| RSS of a fresh process: imports, then the PDF converted and held | {c['pdf_rss_mib'][0]} MiB -> "
        f"{c['pdf_rss_mib'][1]} MiB |",
        f"| locate a span (offsets -> page, boxes) | {c['locate_us_per_span']} µs |",
        f"| draw one page as PNG (2,400 px) | {c['render_page_s']} s, {c['render_png_bytes']} bytes |",
        f"| DOCX ({c['docx_chars']} chars) | {c['docx_seconds'] * 1000:.1f} ms |",
        f"| HTML ({c['html_chars']} chars) | {c['html_seconds'] * 1000:.1f} ms |",
    ]
    for name, run in report["end_to_end"].items():
        if "chunks" in run:
            lines.append(f"| end to end, {name} | {run['seconds']} s, {run['chunks']} chunks, ok: {run['ok']} |")
            continue
        lines.append(
            f"| end to end, {name}: {run['docs']} docs | {run['seconds']} s, **{run['docs_per_s']} docs/s**, "
            f"{run['right']} with period + page 2 |"
        )
    if (RESULTS / "kleister.json").is_file():  # contracts stage by stage (bench.kleister), before and after
        lines += ["", "## Contracts, stage by stage", *stage_table(json.loads((RESULTS / "kleister.json").read_text()))]
    lines += [
        "",
        "## Bad documents",
        "",
        "| input | bytes | status | error | message | cost |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in report["bad"]:
        message = row["message"].replace("|", "\\|")
        lines.append(
            f"| {row['input']} | {row['bytes']} | {row['status']} | `{row['code']}` | {message} | {row['ms']} ms |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description="documents in: conversion and end-to-end throughput")
    parser.add_argument("--pages", type=int, default=100, help="pages of the long PDF (default 100)")
    parser.add_argument("--docs", type=int, default=32, help="two-page PDFs end to end (default 32)")
    parser.add_argument("--engine", choices=["scripted", "vllm"], default="scripted")
    parser.add_argument("--long", action="store_true", help="with --engine vllm: also the long PDF, chunked")
    parser.add_argument("--out", type=Path, default=RESULTS / "documents.md")
    parser.add_argument("--render", action="store_true", help="only write the page again from documents.json")
    args = parser.parse_args()
    if args.render:
        return publish(markdown(json.loads((RESULTS / "documents.json").read_text())), args.out) or 0
    with printer() as chromium:
        started = time.perf_counter()
        pdf = long_pdf(chromium, args.pages)
        print_s = time.perf_counter() - started
        two_pages = chromium.print_pages(landmark_pages()).pdf
        bad = bad_table(chromium)
    docx = docx_bytes([PARAGRAPH_EN, PARAGRAPH_ZH] * 100 + [LANDMARK_TEXT])
    page = "".join(f"<section><h2>{i}</h2><p>{PARAGRAPH_EN}</p><p>{PARAGRAPH_ZH}</p></section>" for i in range(100))
    html = f"<!doctype html><html><head><meta charset=utf-8></head><body>{page}</body></html>".encode()
    report: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "args": "".join(
            f" --{k} {v}" for k, v in (("pages", args.pages), ("docs", args.docs), ("engine", args.engine))
        ),
        "chromium_print_s": round(print_s, 1),
        "conversion": conversion(pdf, args.pages, docx, html),
        "bad": bad,
        "end_to_end": {},
    }
    scripted = ScriptedEngine(respond=lambda request: landmark(name="阿尔罕布拉宫", period=PERIOD))
    with Extractor(settings=Settings.from_env(engine="scripted"), engine=scripted) as extractor:
        report["end_to_end"]["scripted engine, two-page PDFs"] = asyncio.run(
            end_to_end(extractor, [two_pages] * args.docs, options=Options())
        )
        long_run = asyncio.run(end_to_end(extractor, [pdf], options=Options(chunk=True)))
        report["end_to_end"][f"scripted engine, the {args.pages}-page PDF chunked"] = long_run
    if args.engine == "vllm":
        settings = Settings.from_env(engine="vllm", max_num_seqs=16, kv_cache_space_gib=2)
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
        with Extractor(settings=settings, tasks=["landmark_slots"]) as extractor:
            extractor.start()
            report["end_to_end"]["vLLM (default model), two-page PDFs"] = asyncio.run(
                end_to_end(extractor, [two_pages] * args.docs, options=Options(temperature=0.0))
            )
            if args.long:
                long_run = asyncio.run(end_to_end(extractor, [pdf], options=Options(chunk=True, temperature=0.0)))
                report["end_to_end"][f"vLLM (default model), the {args.pages}-page PDF chunked"] = long_run
    publish(markdown(report), args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
