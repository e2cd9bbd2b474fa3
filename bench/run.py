"""`make bench`: P1–P3 and the quality table in one run, then the report and the plot.

Each phase starts its own engine in its own process (one engine at a time on a small machine):
``bench.compact`` (P1, P2, the quality table and P3's compact side), then ``bench.whitespace``
(P3's other side). Results: ``bench/results/{quick,full}.md`` and ``.png``, and the raw JSON
under ``bench/results/raw/``.

    python -m bench.run --quick      # ~5 minutes on 2 CPU cores, engine starts included
    python -m bench.run              # the full run
    python -m bench.run --report     # re-render the report from the last raw results
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import RESULTS, ROOT, pyplot


def main() -> int:
    parser = argparse.ArgumentParser(description="extractor benchmarks: P1-P3 and quality")
    parser.add_argument("--quick", action="store_true", help="a small run (a few minutes)")
    parser.add_argument("--report", action="store_true", help="only render the report from the last raw results")
    args = parser.parse_args()
    name = "quick" if args.quick else "full"
    raw = {phase: RESULTS / "raw" / f"{name}-{phase}.json" for phase in ("compact", "whitespace")}
    started = time.perf_counter()
    if not args.report:
        for phase, path in raw.items():
            log = path.with_suffix(".log")
            print(f"== {phase} phase (engine logs: {log})", flush=True)
            command = [sys.executable, "-m", f"bench.{phase}", "--out", str(path), *(["--quick"] if args.quick else [])]
            if run_phase(command, log) != 0:
                print(f"bench: the {phase} phase failed; see {log}", file=sys.stderr)
                return 1
    compact, whitespace = (json.loads(path.read_text(encoding="utf-8")) for path in raw.values())
    png = RESULTS / f"{name}.png"
    plotted = plot(compact, whitespace, png)
    text = markdown(compact, whitespace, plot=png.name if plotted else None)
    (RESULTS / f"{name}.md").write_text(text, encoding="utf-8")
    print(text)
    print(f"report: {RESULTS / f'{name}.md'}" + (f", plot: {png}" if plotted else " (no matplotlib: no plot)"))
    if not args.report:
        print(f"bench took {time.perf_counter() - started:.0f} s")
    return 0


def run_phase(command: list[str], log: Path) -> int:
    """Run one phase, its output to ``log``; echo its ``bench:`` lines (vLLM's logs are long)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w", encoding="utf-8") as sink:
        process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert process.stdout is not None
        for line in process.stdout:
            sink.write(line)
            if line.startswith("bench: "):
                print(line.removeprefix("bench: "), end="", flush=True)
        return process.wait()


# The page: tables (markdown, printed and saved) and one PNG from the phases' JSON results.

P1_TARGET, P2_TARGET, P3_TARGET = 0.95, 1.4, 0.8


def _rate(docs: int, seconds: float) -> float:
    return docs / seconds if seconds else 0.0


def numbers(compact: dict[str, Any], whitespace: dict[str, Any]) -> dict[str, float]:
    """The headline ratios."""
    p1, p2 = compact["p1"], compact["p2"]
    ours_rate = _rate(p1["extractor"]["docs"], p1["extractor"]["seconds"])
    raw_rate = _rate(p1["raw"]["docs"], p1["raw"]["seconds"])
    seed_rate = _rate(p2["docs"], p2["seed"]["seconds"])
    ours2_rate = _rate(p2["docs"], p2["extractor"]["seconds"])
    # P3 compares decoding by the task schema on both sides: the ungrounded raw pass
    plain = p1["raw_ungrounded"]
    compact_tokens = plain["completion_tokens"] / plain["docs"]
    free_tokens = whitespace["raw"]["completion_tokens"] / whitespace["raw"]["docs"]
    spaced_tokens = whitespace["spaced"]["completion_tokens"] / whitespace["spaced"]["docs"]
    ours_off = _rate(p1["extractor_ungrounded"]["docs"], p1["extractor_ungrounded"]["seconds"])
    raw_off = _rate(plain["docs"], plain["seconds"])
    return {
        "p1_ungrounded_ratio": ours_off / raw_off if raw_off else 0.0,
        "p1_ratio": ours_rate / raw_rate if raw_rate else 0.0,
        "p1_extractor_docs_per_s": ours_rate,
        "p1_raw_docs_per_s": raw_rate,
        "p2_speedup": ours2_rate / seed_rate if seed_rate else 0.0,
        "p2_seed_docs_per_s": seed_rate,
        "p2_extractor_docs_per_s": ours2_rate,
        "p3_ratio": compact_tokens / spaced_tokens if spaced_tokens else 0.0,
        "p3_flag_only_ratio": compact_tokens / free_tokens if free_tokens else 0.0,
        "p3_compact_tokens": compact_tokens,
        "p3_whitespace_tokens": spaced_tokens,
        "p3_whitespace_compact_examples_tokens": free_tokens,
    }


def _stages(run: dict[str, Any]) -> list[str]:
    spent = run["stages"]
    lines = [
        "",
        f"Where the shipped-defaults batch spent its {run['seconds']:.1f} s (synchronous stages are event-loop time; "
        "`generate` is summed over concurrent requests, so it overlaps itself):",
        "",
        "| stage | seconds | ms/doc |",
        "|---|---:|---:|",
    ]
    for stage, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {stage} | {seconds:.2f} | {1000 * seconds / max(1, run['docs']):.1f} |")
    return lines


def _verdict(met: bool) -> str:
    return "met" if met else "**not met**"


def markdown(compact: dict[str, Any], whitespace: dict[str, Any], *, plot: str | None) -> str:
    n = numbers(compact, whitespace)
    m, p1, p2, q = compact["machine"], compact["p1"], compact["p2"], compact["quality"]
    gpu = m.get("gpu") or "no GPU"
    kind = "quick" if compact["quick"] else "full"
    per_task = p1["raw"]["docs"] // max(1, 2 * len(p1["tasks"]))  # P1 runs each side twice
    lines = [
        f"# Benchmarks ({kind} run)",
        "",
        f"Measured {m['date']} on {m['cpu']}, {m['cores']} CPU cores, "
        f"{m['memory']}, {gpu}; "
        f"vLLM {m.get('vllm', '?')}, torch {m.get('torch', '?')}, Python {m['python']}. Model `{compact['model']}` "
        f"in-process; engine start {compact['engine_start_s']:.0f} s (compact) and "
        f"{whitespace['engine_start_s']:.0f} s (whitespace), not counted below.",
        "",
        f"P1–P3 use the first {per_task} SNIPS dev utterances of {', '.join(p1['tasks'])}, the first-attempt "
        "prompts the pipeline renders, greedy decoding, and the same engine for both sides of each comparison "
        "(after one warm-up pass that compiles the grammars and fills the prefix cache).",
        "",
        "## P1 pipeline overhead",
        "",
        "Both sides do the same work: the raw side sends each first-attempt request exactly as the pipeline "
        "builds it, grounded decoding included (the substring grammar), then both sides again with grounded "
        "decoding off (the task schema). Each side runs twice, in A-B-B-A order, and the table sums both "
        "passes (the first pass after the warm-up is the slowest: a fixed order favoured one side).",
        "",
        "| path | docs | seconds | docs/s | output tokens/doc |",
        "|---|---:|---:|---:|---:|",
        _row("raw vLLM generate, grounded decoding (shipped default)", p1["raw"]),
        _row("`extractor batch`, shipped defaults (JSONL in/out, fsync, validate, ground, re-ask)", p1["extractor"]),
        _row("raw vLLM generate, task schema only", p1["raw_ungrounded"]),
        _row("`extractor batch --no-grounded-decoding`", p1["extractor_ungrounded"]),
        "",
        f"extractor / raw with the shipped defaults = **{n['p1_ratio']:.2f}** (target ≥ {P1_TARGET}: "
        f"{_verdict(n['p1_ratio'] >= P1_TARGET)}); with grounded decoding off on both sides "
        f"**{n['p1_ungrounded_ratio']:.2f}**; "
        f"extractor mean attempts {p1['extractor']['attempts'] / max(1, p1['extractor']['docs']):.2f}, "
        f"{p1['extractor']['ok']}/{p1['extractor']['docs']} ok; raw outputs schema-valid "
        f"{p1['raw']['valid']}/{p1['raw']['docs']}.",
        *_stages(p1["extractor"]),
        "",
        "## P2 vs the seed",
        "",
        "| client | docs | seconds | docs/s | schema-valid | mean tries | output tokens/doc |",
        "|---|---:|---:|---:|---:|---:|---:|",
        _seed_row("seed-style: one at a time, free generation, `json.loads` + corrector ≤ 3", p2["docs"], p2["seed"]),
        _seed_row("extractor: concurrent `aextract`, constrained", p2["docs"], p2["extractor"]),
        "",
        f"speed-up **{n['p2_speedup']:.2f}×** (target ≥ {P2_TARGET}× on 2 CPU cores: "
        f"{_verdict(n['p2_speedup'] >= P2_TARGET)}); schema-valid {p2['extractor']['schema_valid_rate']:.0%} "
        f"vs the seed's {p2['seed']['schema_valid_rate']:.0%} (seed JSON parsed: {p2['seed']['json_ok_rate']:.0%}).",
        "",
        "## P3 output tokens per extraction",
        "",
        "| decoding | worked examples in the prompt | docs | output tokens/extraction | compact / this |",
        "|---|---|---:|---:|---:|",
        f"| vLLM default (any whitespace) | `json.dumps` default (`, ` and `: `) | {whitespace['spaced']['docs']} | "
        f"{n['p3_whitespace_tokens']:.1f} | **{n['p3_ratio']:.3f}×** |",
        f"| vLLM default (any whitespace) | compact, as extractor renders them | {whitespace['raw']['docs']} | "
        f"{n['p3_whitespace_compact_examples_tokens']:.1f} | {n['p3_flag_only_ratio']:.3f}× |",
        f"| compact (extractor: `disable_any_whitespace`) | compact | {p1['raw']['docs']} | "
        f"{n['p3_compact_tokens']:.1f} | 1.000× |",
        "",
        f"compact JSON / vLLM's default = **{n['p3_ratio']:.3f}×** "
        f"(target ≤ {P3_TARGET}×: {_verdict(n['p3_ratio'] <= P3_TARGET)}). The model copies the worked "
        "examples' layout: with compact examples it writes compact JSON even where the grammar allows "
        "whitespace (second row), so the saving comes from compact examples and the grammar together; "
        "the grammar alone guarantees it whatever the examples look like.",
        "",
        "## Quality: `extractor eval` on `../shared/eval/snips/dev.jsonl`",
        "",
        f"The first {q['docs'] // max(1, len(q['per_task']))} lines of each intent, task defaults "
        "(as `extractor eval` runs them). "
        f"Overall micro P {q['precision']:.3f}, R {q['recall']:.3f}, **F1 {q['f1']:.3f}**; schema-valid "
        f"{q['schema_valid_rate']:.0%}, first-attempt valid {q['first_attempt_valid_rate']:.0%}, repaired "
        f"{q['repaired_rate']:.0%}, mean attempts {q['mean_attempts']:.2f}, ungrounded values "
        f"{_pct(q['ungrounded_rate'])}, {q['docs_per_s']:.2f} docs/s, "
        f"{q['output_tokens_per_doc']:.1f} output tokens/doc.",
        "",
        "| task | docs | P | R | F1 | schema-valid | first-attempt valid | mean attempts | ungrounded |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, t in q["per_task"].items():
        lines.append(
            f"| {name} | {t['docs']} | {t['precision']:.3f} | {t['recall']:.3f} | {t['f1']:.3f} | "
            f"{t['schema_valid_rate']:.0%} | {t['first_attempt_valid_rate']:.0%} | {t['mean_attempts']:.2f} | "
            f"{_pct(t['ungrounded_rate'])} |"
        )
    if plot:
        lines += ["", f"![throughput, tokens and F1]({plot})"]
    return "\n".join(lines) + "\n"


def _pct(rate: float | None) -> str:
    return "n/a" if rate is None else f"{rate:.0%}"


def _row(label: str, side: dict[str, Any]) -> str:
    docs, seconds = side["docs"], side["seconds"]
    return (
        f"| {label} | {docs} | {seconds:.1f} | {_rate(docs, seconds):.2f} | "
        f"{side['completion_tokens'] / max(1, docs):.1f} |"
    )


def _seed_row(label: str, docs: int, side: dict[str, Any]) -> str:
    return (
        f"| {label} | {docs} | {side['seconds']:.1f} | {_rate(docs, side['seconds']):.2f} | "
        f"{side['schema_valid_rate']:.0%} | {side['mean_tries']:.2f} | {side['completion_tokens'] / max(1, docs):.1f} |"
    )


def plot(compact: dict[str, Any], whitespace: dict[str, Any], path: Path) -> bool:
    """Docs/s, tokens per extraction and per-intent F1 in one PNG; False without matplotlib."""
    plt = pyplot()
    if plt is None:
        return False
    n = numbers(compact, whitespace)
    per_task = compact["quality"]["per_task"]
    fig, (speed, tokens, quality) = plt.subplots(1, 3, figsize=(15, 4.5), gridspec_kw={"width_ratios": [4, 3, 4]})
    labels = ["P1 raw\nvLLM", "P1\nextractor\nbatch", "P2 seed\nstyle, one\nat a time", "P2\nextractor\nconcurrent"]
    values = [
        n["p1_raw_docs_per_s"],
        n["p1_extractor_docs_per_s"],
        n["p2_seed_docs_per_s"],
        n["p2_extractor_docs_per_s"],
    ]
    bars = speed.bar(labels, values, color=["#999999", "#1f77b4", "#999999", "#1f77b4"])
    speed.bar_label(bars, fmt="%.2f")
    speed.set_ylabel("docs/s")
    speed.set_title(f"throughput (P1 ratio {n['p1_ratio']:.2f}, P2 speed-up {n['p2_speedup']:.2f}×)")
    bars = tokens.bar(
        ["default ws,\nspaced\nexamples", "default ws,\ncompact\nexamples", "compact"],
        [n["p3_whitespace_tokens"], n["p3_whitespace_compact_examples_tokens"], n["p3_compact_tokens"]],
        color=["#999999", "#cccccc", "#1f77b4"],
    )
    tokens.bar_label(bars, fmt="%.1f")
    tokens.set_ylabel("output tokens / extraction")
    tokens.set_title(f"P3 tokens ({n['p3_ratio']:.3f}×)")
    names = list(per_task)
    quality.barh([name.removeprefix("snips_") for name in names], [per_task[name]["f1"] for name in names])
    quality.set_xlim(0, 1)
    quality.invert_yaxis()
    quality.set_xlabel("slot F1 (micro)")
    quality.set_title(f"quality on SNIPS dev (F1 {compact['quality']['f1']:.3f})")
    m = compact["machine"]
    fig.suptitle(f"extractor on {m['cores']} CPU cores, {m.get('gpu') or 'no GPU'}: {compact['model']}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


if __name__ == "__main__":
    sys.exit(main())
