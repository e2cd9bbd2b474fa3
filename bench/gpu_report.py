"""`bench/results/gpu.md` and `gpu.png` from the GPU runs' raw files (bench/results/raw/gpu-*.json).

    python -m bench.gpu_report

The raw files come back from the GPU host (`bench/gpu/README.md` says which command writes
which); this renders them without the host. The words are `bench/templates/gpu.md`'s, one section
per part of the page; this module computes the numbers and tables that fill its placeholders from the
runs a re-run writes again (``engine``, ``p1-pipeline``, ``http``, ``serve``, ``eval``). The sections on
one-off runs (``findings``, ``p5``: the front end's process, logprobs, the mask fill and levers, P5 by the
old method; the run before the P1 method's fixes, ``p1-pipeline-unprimed``) are the words and figures those
runs gave, fixed in the template (their renderers, removed, are in git history at ffef660 and 5bd78aa).
"""

from __future__ import annotations

import json
import re
import string
from pathlib import Path
from typing import Any

from bench.common import RESULTS, pyplot

RAW = RESULTS / "raw"


LATEST = "p1-pipeline"  # P1 batch and HTTP, latency: the code as shipped
# the page's prose, its numbers and tables as ``$name`` placeholders
TEMPLATE = Path(__file__).resolve().parent / "templates" / "gpu.md"


def _sections() -> dict[str, str]:
    """The template's sections by name: the text after each ``<!-- name -->`` line, up to the next."""
    parts = re.split(r"^<!-- (\w+) -->\n", TEMPLATE.read_text(encoding="utf-8"), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _text(name: str, **fields: object) -> str:
    """One section with its ``$name`` placeholders filled, less the newline that ends it."""
    return string.Template(_sections()[name].removesuffix("\n")).substitute({k: str(v) for k, v in fields.items()})


def _lines(name: str, **fields: object) -> list[str]:
    return _text(name, **fields).split("\n")


def _load(name: str) -> dict[str, Any]:
    path = RAW / f"gpu-{name}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _rate(side: dict[str, Any]) -> float:
    return float(side["docs"] / side["seconds"])


def markdown() -> str:
    engine, http, serve, quality = (_load(n) for n in ("engine", "http", "serve", "eval"))
    m = engine["start"]["machine"]
    latest = _load(LATEST)
    p1 = latest["p1"]
    raw, raw_off = _rate(p1["raw"]), _rate(p1["raw_ungrounded"])
    raw_lp = _rate(p1["raw_logprobs"])
    ours, ours_off, one = _rate(p1["extractor"]), _rate(p1["extractor_ungrounded"]), _rate(p1["extractor_one_attempt"])
    over_http = latest["p1_http"]
    rates = over_http["docs_per_s"]
    passes = {k: ", ".join(f"{x:.2f}" for x in p1[k]["passes_s"]) for k in ("extractor", "raw", "raw_logprobs")}
    cpu = (RAW / "gpu-pipeline-cpu.txt").read_text(encoding="utf-8").splitlines()
    lines = _lines(
        "head",
        date=m["date"],
        gpu=m["gpu"],
        vllm=m["vllm"],
        torch=m["torch"],
        python=m["python"],
        cores=m["cores"],
        latest_date=latest["start"]["machine"]["date"],
        ours=f"{ours:.1f}",
        raw=f"{raw:.1f}",
        ours_raw=f"{ours / raw:.2f}",
        raw_lp=f"{raw_lp:.1f}",
        ours_raw_lp=f"{ours / raw_lp:.2f}",
        ours_off=f"{ours_off:.1f}",
        raw_off=f"{raw_off:.1f}",
        ours_off_raw_off=f"{ours_off / raw_off:.2f}",
        one=f"{one:.1f}",
        one_raw=f"{one / raw:.2f}",
        clients=over_http["clients"],
        http=f"{rates['http']:.1f}",
        http_raw=f"{rates['raw']:.1f}",
        http_ratio=f"{over_http['ratio']:.2f}",
        passes_extractor=passes["extractor"],
        passes_raw=passes["raw"],
        passes_raw_lp=passes["raw_logprobs"],
        lp_cost=f"{(1 - raw_lp / raw) * 100:.0f}",
        cpu_total=cpu[0].removeprefix("bench: "),
        cpu_stages="; ".join(" ".join(ln.split()) for ln in cpu[1:] if ln.strip()),
    )
    lines += _lines("findings")
    own = {k: v for k, v in p1["extractor"].get("stages", {}).items() if not k.startswith("generate")}
    pass_rows = []
    for side, rows in over_http["passes"].items():
        for n, r in enumerate(rows):
            label = "http, under py-spy" if side == "http_profiled" or n == 2 else side
            busy = ", ".join(f"{k} {v:.2f}" for k, v in list(r["cpu"].items())[:3])
            p50 = f"{r['p50_s']:.2f}" if r.get("p50_s") is not None else "—"
            pass_rows.append(f"| {label} | {r['seconds']:.2f} | {r['docs'] / r['seconds']:.1f} | {p50} | {busy} |")
    lines += [
        "",
        *_lines(
            "before",
            attempts=p1["extractor"]["attempts"],
            docs=p1["extractor"]["docs"],
            tokens=f"{p1['extractor']['completion_tokens']:,}",
            raw_tokens=f"{p1['raw']['completion_tokens']:,}",
            stages=", ".join(f"{k} {v * 1000:.0f} ms" for k, v in own.items()),
            per_doc=f"{sum(own.values()) * 1000 / p1['extractor']['docs']:.2f}",
            rows="\n".join(pass_rows),
            latest=f"{rates['http']:.1f} vs {rates['raw']:.1f} docs/s = **{over_http['ratio']:.2f}**",
        ),
    ]
    lines += _lines("p5")
    g = engine["grounded_by_length"]
    length_rows = []
    for r, c in zip(g["throughput"], g["compile"], strict=False):
        tok = (r["on_docs_per_s"] * r["on_output_tokens"]) / (r["off_docs_per_s"] * r["off_output_tokens"])
        length_rows.append(
            f"| {r['words']} | {r['docs']} | {r['on_docs_per_s']:.1f} | {r['off_docs_per_s']:.1f} | "
            f"**{r['ratio']:.2f}** | {r['on_output_tokens']:.1f} / {r['off_output_tokens']:.1f} | {tok:.2f} | "
            f"{c['grammar_ms']:.1f} ({c['words']} words) |"
        )
    lines += _lines(
        "grounded",
        docs=p1["raw"]["docs"] // 2,
        raw=f"{raw:.1f}",
        raw_off=f"{raw_off:.1f}",
        raw_ratio=f"{raw / raw_off:.2f}",
        ours=f"{ours:.1f}",
        ours_off=f"{ours_off:.1f}",
        ours_ratio=f"{ours / ours_off:.2f}",
        rows="\n".join(length_rows),
    )
    if latest.get("http"):
        rows = [
            f"| {r['clients']} | {r['docs']} | {r['docs_per_s']:.1f} | {r['p50_s']:.3f} | {r['p99_s']:.3f} | "
            f"{', '.join(f'{k}: {v}' for k, v in r['statuses'].items())} |"
            for r in latest["http"]
        ]
        lines += _lines("latency", rows="\n".join(rows))
    if serve.get("serve"):
        s = serve["serve"]
        lines += _lines(
            "serve",
            ready=f"{s['ready_s']:.1f}",
            first=f"{s['first_result_s']:.1f}",
            account="; ".join(
                ln.split("] ", 1)[-1]
                for ln in s["engine_log"]
                if "Model loading took" in ln or "Available KV" in ln or "Graph capturing" in ln
            ),
            processes="\n".join(
                f"- `nvidia-smi`: {p['name']} {int(p['used_mib']):,} MiB" for p in s["gpu_memory"]["processes"]
            ),
            used=f"{http['start']['gpu_memory']['used_mib']:,}",
        )
    if http.get("p2"):
        p2 = http["p2"]
        seed_rate, ours_rate = p2["docs"] / p2["seed"]["seconds"], p2["docs"] / p2["extractor"]["seconds"]
        lines += _lines(
            "p2",
            docs=p2["docs"],
            seed=f"{seed_rate:.2f}",
            seed_valid=f"{p2['seed']['schema_valid_rate']:.0%}",
            ours=f"{ours_rate:.1f}",
            ours_valid=f"{p2['extractor']['schema_valid_rate']:.0%}",
            speedup=f"{ours_rate / seed_rate:.0f}",
        )
    if quality:
        lines += _lines(
            "quality",
            docs=quality["docs"],
            f1=f"{quality['f1']:.3f}",
            precision=f"{quality['precision']:.3f}",
            recall=f"{quality['recall']:.3f}",
            valid=f"{quality['schema_valid_rate']:.0%}",
            rate=f"{quality['docs_per_s']:.1f}",
        )
    return "\n".join(lines)


def plot(path: Path) -> bool:
    """Three panels: P1 pairs, grounded on/off by length, latency by clients; False without matplotlib."""
    plt = pyplot()
    if plt is None:
        return False
    engine, latest = _load("engine"), _load(LATEST)
    p1, over_http = latest["p1"], latest["p1_http"]["docs_per_s"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    pairs = [
        ("grounded\n(shipped)", _rate(p1["extractor"]), _rate(p1["raw"])),
        ("one attempt", _rate(p1["extractor_one_attempt"]), _rate(p1["raw"])),
        ("ungrounded", _rate(p1["extractor_ungrounded"]), _rate(p1["raw_ungrounded"])),
        ("POST /extract,\n256 clients", over_http["http"], over_http["raw"]),
    ]
    xs = range(len(pairs))
    axes[0].bar([x - 0.2 for x in xs], [p[1] for p in pairs], 0.4, label="extractor")
    axes[0].bar([x + 0.2 for x in xs], [p[2] for p in pairs], 0.4, label="raw vLLM")
    axes[0].set_xticks(list(xs), [p[0] for p in pairs])
    axes[0].set_ylabel("docs/s")
    axes[0].set_title("P1 on one H200 (7B dummy weights, 700 docs)")
    axes[0].legend()
    rows = engine["grounded_by_length"]["throughput"]
    axes[1].plot([r["words"] for r in rows], [r["ratio"] for r in rows], "o-", label="docs/s on / off")
    axes[1].plot(
        [r["words"] for r in rows],
        [(r["on_docs_per_s"] * r["on_output_tokens"]) / (r["off_docs_per_s"] * r["off_output_tokens"]) for r in rows],
        "s--",
        label="output tok/s on / off",
    )
    axes[1].axhline(0.7, color="grey", lw=0.8, ls=":")
    axes[1].set_xscale("log")
    axes[1].set_xlabel("words in the text")
    axes[1].set_title("grounded decoding on / off")
    axes[1].legend()
    lat = latest.get("http", [])
    axes[2].plot([r["clients"] for r in lat], [r["p50_s"] for r in lat], "o-", label="p50")
    axes[2].plot([r["clients"] for r in lat], [r["p99_s"] for r in lat], "s--", label="p99")
    axes[2].set_xscale("log")
    axes[2].set_xlabel("concurrent clients")
    axes[2].set_ylabel("seconds")
    axes[2].set_title("POST /extract latency")
    axes[2].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def tests() -> str:
    """The GPU run of ``pytest -m engine`` (its summary lines, kept in raw/gpu-engine-tests.txt)."""
    path = RAW / "gpu-engine-tests.txt"
    if not path.is_file():
        return ""
    return _text("tests", log=path.read_text(encoding="utf-8")) + "\n"


def write() -> None:
    out = RESULTS / "gpu.md"
    png = RESULTS / "gpu.png"
    text = markdown() + "\n" + tests() + _text("foot") + "\n"
    if plot(png):
        text += f"\n![P1, grounded decoding by length, latency]({png.name})\n"
    out.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    write()
