"""`bench/results/gpu.md` and `gpu.png` from the GPU runs' raw files (bench/results/raw/gpu-*.json).

    python -m bench.gpu_report

The raw files come back from the GPU host (`bench/gpu/README.md` says which command writes
which); this renders them without the host. The words are `bench/templates/gpu.md`'s, one section
per part of the page; this module computes the numbers and tables that fill its placeholders.
"""

from __future__ import annotations

import json
import re
import string
from pathlib import Path
from typing import Any

from bench import mask_fill
from bench.common import RESULTS

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


def _tok_rate(side: dict[str, Any]) -> float:
    return float(side["completion_tokens"] / side["seconds"])


def _compile_share(name: str) -> float:
    """CPU seconds py-spy saw in vLLM's grammar compiles (its engine core's pool) in a profile of one pass."""
    seen = 0
    for line in (RAW / name).read_text(encoding="utf-8").splitlines():
        stack, _, count = line.rpartition(" ")
        if "compile_grammar (vllm/v1/structured_output/backend_guidance.py" in stack.rsplit(";", 3)[-1]:
            seen += int(count)
    return seen / 100  # sampled at 100 Hz


def tokens_only() -> list[str]:
    """vLLM asked for an answer's tokens only where logprobs come back (its text decoded from their bytes)."""
    run = _load("p1-tokens-only")
    p1, http = run["p1"], run["p1_http"]
    raw, raw_lp, ours = _rate(p1["raw"]), _rate(p1["raw_logprobs"]), _rate(p1["extractor"])
    before = _load(LATEST)["p1"]
    before_cost = 1 - _rate(before["raw_logprobs"]) / _rate(before["raw"])
    stages = {k: v for k, v in p1["extractor"]["stages"].items() if k.startswith("render")}
    stages_before = {k: v for k, v in before["extractor"]["stages"].items() if k.startswith("render")}
    compile_s = _compile_share("gpu-pyspy-raw.txt")
    return _lines(
        "tokens_only",
        date=run["start"]["machine"]["date"],
        raw=f"{raw:.1f}",
        raw_lp=f"{raw_lp:.1f}",
        cost=f"{(1 - raw_lp / raw) * 100:.0f}",
        cost_before=f"{before_cost * 100:.0f}",
        clients=http["clients"],
        http=f"{http['docs_per_s']['http']:.1f}",
        http_raw=f"{http['docs_per_s']['raw']:.1f}",
        http_ratio=f"{http['ratio']:.2f}",
        ours=f"{ours:.1f}",
        ours_raw=f"{ours / raw:.2f}",
        ours_raw_lp=f"{ours / raw_lp:.2f}",
        off_ratio=f"{_rate(p1['extractor_ungrounded']) / _rate(p1['raw_ungrounded']):.2f}",
        render=f"{sum(stages.values()):.2f}",
        render_before=f"{sum(stages_before.values()):.2f}",
        compile_s=f"{compile_s:.1f}",
        compile_ms=f"{compile_s / 0.7:.0f}",
    )


def front_end() -> list[str]:
    """Where vLLM's front end runs: a process of its own vs the service's (same host, back to back)."""
    shared, own = _load("p1-shared"), _load("p1-own-ends-in-child")
    rows = []
    for name, run in ((_text("front_end_shared"), shared), (_text("front_end_own"), own)):
        p = run["p1"]
        r, r_off = _rate(p["raw"]), _rate(p["raw_ungrounded"])
        rows.append(
            f"| {name} | {_rate(p['extractor']):.1f} | {r:.1f} | {_rate(p['extractor']) / r:.2f} "
            f"| {_rate(p['extractor_ungrounded']):.1f} | {r_off:.1f} | {_rate(p['extractor_ungrounded']) / r_off:.2f} "
            f"| {_rate(p['extractor_one_attempt']):.1f} |"
        )
    skip = _load("p1-skip")["p1_http"]
    own_http = _load("p1-own")["p1_http"]
    return _lines(
        "front_end",
        rows="\n".join(rows),
        raw_shared=f"{_rate(shared['p1']['raw']):.0f}",
        raw_own=f"{_rate(own['p1']['raw']):.0f}",
        http_skip=f"{skip['docs_per_s']['http']:.0f}",
        http_own=f"{own_http['docs_per_s']['http']:.0f}",
        ratio_skip=f"{skip['ratio']:.2f}",
        ratio_own=f"{own_http['ratio']:.2f}",
    )


def _p5(run: dict[str, Any], layout: str, side: str) -> float:
    return float(run[layout][side]["tok_s"] / run[layout]["free"]["tok_s"])


def logprobs_cost() -> list[str]:
    """What the confidences' logprobs cost P1 (one host, A-B), and the batch's concurrency above vLLM's."""
    asked, dropped = _load("p1-logprobs-asked"), _load("p1-logprobs-dropped")
    again = _load("p1-logprobs-asked-2")
    head, more = _load("p1-c256"), _load("p1-c384")
    rows = []
    again_logprobs = _rate(again["p1"]["extractor"]) / _rate(again["p1"]["raw_logprobs"])
    for label, run in (
        (_text("logprobs_asked"), asked),
        (_text("logprobs_dropped"), dropped),
        (_text("logprobs_again", again=f"{again_logprobs:.2f}"), again),
    ):
        p1 = run["p1"]
        ours, raw = _rate(p1["extractor"]), _rate(p1["raw"])
        off, raw_off = _rate(p1["extractor_ungrounded"]), _rate(p1["raw_ungrounded"])
        rows.append(
            f"| {label} | {ours:.1f} | {raw:.1f} | **{ours / raw:.2f}** | {off:.1f} | {raw_off:.1f} "
            f"| **{off / raw_off:.2f}** |"
        )
    wide = []
    for run in (head, more):
        p1 = run["p1"]
        wide.append(
            f"{run['start']['concurrency']} at once: {_rate(p1['extractor']):.1f} vs {_rate(p1['raw']):.1f} docs/s "
            f"= {_rate(p1['extractor']) / _rate(p1['raw']):.2f}"
        )
    return _lines(
        "logprobs_cost",
        date=asked["start"]["machine"]["date"],
        rows="\n".join(rows),
        raw_lp=f"{_rate(asked['p1']['raw_logprobs']):.1f}",
        raw=f"{_rate(asked['p1']['raw']):.1f}",
        wide_first=wide[0],
        wide_second=wide[1],
    )


def levers() -> list[str]:
    """The mask levers of 2026-12-05, one staging A-B-C-A (``mask_levers.md``)."""
    if not mask_fill.LEVER_RUNS:
        return []
    return _lines("levers", table="\n".join(mask_fill.lever_table(mask_fill.LEVER_RUNS)))


def same_answers() -> list[str]:
    """P5 against free text of the same answers, as shipped (the method since 2026-12-04; ``mask_fill.md``)."""
    shipped = [p for p in mask_fill.SAME_RUNS if not mask_fill.tries_a_lever(json.loads(p.read_text(encoding="utf-8")))]
    if not shipped:
        return []
    return _lines("same_answers", table=mask_fill.same_answers(shipped))


def grammar_form() -> list[str]:
    """P5 with the substring grammar as shipped (lean) and as before, one host."""
    lean, full = (json.loads((RAW / f"mask-fill-16-{n}.json").read_text(encoding="utf-8")) for n in ("lean", "full"))
    rows = [
        f"| {label} | {_p5(run, 'per_task', 'schema'):.2f} | {_p5(run, 'per_task', 'grounded'):.2f} "
        f"| {_p5(run, 'mixed', 'schema'):.2f} | {_p5(run, 'mixed', 'grounded'):.2f} |"
        for label, run in ((_text("grammar_lean"), lean), (_text("grammar_full"), full))
    ]
    return _lines("grammar_form", date=lean["machine"]["date"], rows="\n".join(rows))


def _ratio(run: dict[str, Any]) -> str:
    return f"{run['docs_per_s']['http']:.1f} vs {run['docs_per_s']['raw']:.1f} docs/s = **{run['ratio']:.2f}**"


def markdown() -> str:
    engine, http, xgrammar, serve, quality = (_load(n) for n in ("engine", "http", "xgrammar", "serve", "eval"))
    m = engine["start"]["machine"]
    latest = _load(LATEST)
    p1 = latest["p1"]
    raw, raw_off = _rate(p1["raw"]), _rate(p1["raw_ungrounded"])
    raw_lp = _rate(p1["raw_logprobs"])
    ours, ours_off, one = _rate(p1["extractor"]), _rate(p1["extractor_ungrounded"]), _rate(p1["extractor_one_attempt"])
    before = engine["p1"]
    over_http = latest["p1_http"]
    rates = over_http["docs_per_s"]
    passes = {k: ", ".join(f"{x:.2f}" for x in p1[k]["passes_s"]) for k in ("extractor", "raw", "raw_logprobs")}
    unprimed = _load("p1-pipeline-unprimed")["p1"]
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
        unprimed_first=f"{unprimed['extractor']['passes_s'][0]:.2f}",
        unprimed_second=f"{unprimed['extractor']['passes_s'][1]:.2f}",
        unprimed_raw=", ".join(f"{x:.2f}" for x in unprimed["raw"]["passes_s"]),
        cpu_total=cpu[0].removeprefix("bench: "),
        cpu_stages="; ".join(" ".join(ln.split()) for ln in cpu[1:] if ln.strip()),
    )
    lines += ["", *tokens_only()]
    lines += ["", *logprobs_cost()]
    lines += ["", *front_end()]
    b_raw = _rate(before["raw"])
    own = {k: v for k, v in p1["extractor"].get("stages", {}).items() if not k.startswith("generate")}
    pass_rows = []
    for side, rows in over_http["passes"].items():
        for n, r in enumerate(rows):
            label = "http, under py-spy" if side == "http_profiled" or n == 2 else side
            busy = ", ".join(f"{k} {v:.2f}" for k, v in list(r["cpu"].items())[:3])
            p50 = f"{r['p50_s']:.2f}" if r.get("p50_s") is not None else "—"
            pass_rows.append(f"| {label} | {r['seconds']:.2f} | {r['docs'] / r['seconds']:.1f} | {p50} | {busy} |")
    p5 = engine["p5"]
    p5_rows = []
    for run in (p5, xgrammar.get("p5")):
        if not run:
            continue
        free = _tok_rate(run["free"])
        for key in ("free", "schema", "grounded"):
            if key in run:
                side = run[key]
                p5_rows.append(
                    f"| {run['backend']} | {key} | {side['docs']} | {_tok_rate(side):,.0f} | {_rate(side):.1f} | "
                    f"{_tok_rate(side) / free:.2f} | {side['completion_tokens'] / side['docs']:.1f} |"
                )
    lines += [
        "",
        *_lines(
            "before",
            ours=f"{_rate(before['extractor']):.1f}",
            raw=f"{b_raw:.1f}",
            ratio=f"{_rate(before['extractor']) / b_raw:.2f}",
            off_ratio=f"{_rate(before['extractor_ungrounded']) / _rate(before['raw_ungrounded']):.2f}",
            attempts=p1["extractor"]["attempts"],
            docs=p1["extractor"]["docs"],
            tokens=f"{p1['extractor']['completion_tokens']:,}",
            raw_tokens=f"{p1['raw']['completion_tokens']:,}",
            stages=", ".join(f"{k} {v * 1000:.0f} ms" for k, v in own.items()),
            per_doc=f"{sum(own.values()) * 1000 / p1['extractor']['docs']:.2f}",
            rows="\n".join(pass_rows),
            httpx=_ratio(_load("p1http-httpx")["p1_http"]),
            aiohttp=_ratio(_load("p1http-aiohttp")["p1_http"]),
            aiohttp_700=_ratio(_load("p1http-aiohttp-700")["p1_http"]),
            latest=_ratio(over_http),
            max_tokens=p5["max_tokens"],
            p5_rows="\n".join(p5_rows),
        ),
    ]
    matched = _load("p1http-aiohttp").get("p5") or {}
    if matched.get("free_matched"):
        free_m = _tok_rate(matched["free_matched"])
        rows = []
        for layout, run, free_at in (
            ("per task", matched, free_m),
            ("mixed", matched.get("mixed", {}), _tok_rate(matched["mixed"]["free_matched"])),
        ):
            for key in ("free_matched", "schema", "grounded"):
                side = run[key]
                rows.append(
                    f"| {key.replace('_', ' at ')}, {layout} | {side['docs']} | {_tok_rate(side):,.0f} | "
                    f"{_rate(side):.1f} | **{_tok_rate(side) / free_at:.2f}** | "
                    f"{side['completion_tokens'] / side['docs']:.1f} |"
                )
        lines += _lines("matched", max_tokens=matched["free_matched"]["max_tokens"], rows="\n".join(rows))
    lines += _lines("p5_target")
    masks = list(mask_fill.RUNS)
    if all(p.is_file() for p in masks):
        lines += [*_lines("masks", mask_fill=mask_fill.render(masks)), *grammar_form(), *same_answers(), *levers()]
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
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
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
