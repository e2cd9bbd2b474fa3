"""Per-token mask cost of the substring grammar's value lexeme, by which intersections it carries.

llguidance computes each decoding step's token mask on the CPU; the value lexeme is the substring
automaton intersected (``&``) with the length bound, the trim rule and the letter-or-digit rule.
This measures the mean mask time over random 60-token walks (llguidance's matcher, the default
model's tokenizer, `snips_get_weather`), for texts of 170 and 1,000 words — the lever left for
issue 14's throughput target.

    .venv/bin/python -m bench.experiments.grammar_mask
"""

from __future__ import annotations

import random
import time

import numpy as np

from bench.common import ROOT, write_table
from bench.grounded_grammar import TASK, texts
from extractor import Catalog, Settings
from extractor.constraints import substring
from extractor.constraints.grounded_decoding import extractive_nodes
from extractor.models import default_model_dir

VARIANTS = {
    "length + trim + letter (shipped)": {0, 1, 2},
    "length + trim": {0, 1},
    "trim + letter": {1, 2},
    "length": {0},
    "none": set(),
}


def mask_ms(lt: object, tok: object, lark: str, rng: random.Random) -> float:
    import llguidance
    import llguidance.numpy

    matcher = llguidance.LLMatcher(lt, llguidance.grammar_from("lark", lark))
    mask = llguidance.numpy.allocate_token_bitmask(1, lt.vocab_size)  # type: ignore[attr-defined]
    times = []
    for _ in range(60):
        start = time.perf_counter()
        llguidance.numpy.fill_next_token_bitmask(matcher, mask, 0)
        times.append(time.perf_counter() - start)
        bits = np.unpackbits(mask[0].view(np.uint8), bitorder="little")[: lt.vocab_size]  # type: ignore[attr-defined]
        allowed = [t for t in np.flatnonzero(bits) if t != tok.eos_token_id]  # type: ignore[attr-defined]
        if not allowed:
            break
        matcher.consume_token(int(rng.choice(allowed)))
    return 1000 * float(np.mean(times))


def keep(lark: str, kept: set[int]) -> str:
    lines = []
    for line in lark.splitlines():
        if line.startswith("SUB"):
            name, rest = line.split(": ", 1)
            parts = rest.split(" & ")
            line = name + ": " + " & ".join([parts[0], *(p for i, p in enumerate(parts[1:]) if i in kept)])
        lines.append(line)
    return "\n".join(lines) + "\n"


def main() -> None:
    import llguidance.hf
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(default_model_dir(Settings.from_env())))
    lt = llguidance.hf.from_tokenizer(tok)
    task = Catalog.load(ROOT).get(TASK)
    rows = []
    for words in (170, 1000):
        lark = substring.translate(task.schema, texts(words, 1)[0], extractive_nodes(task.schema, everywhere=True)).lark
        for label, kept in VARIANTS.items():
            runs = [mask_ms(lt, tok, keep(lark, kept), random.Random(seed)) for seed in range(3)]
            rows.append((words, label, float(np.median(runs))))
            print(f"bench: {words} words, {label}: {rows[-1][2]:.3f} ms/token", flush=True)
    write_table(
        "grammar_mask.md",
        "Substring grammar: mask cost per token by intersection",
        f"llguidance matcher, default model's tokenizer, `{TASK}`, random 60-token walks, median of 3. "
        "`python -m bench.grammar_mask`. A 2-core machine: absolute times move with load, compare within a column.",
        ["words", "value lexeme", "mask ms/token"],
        [f"| {w} | {label} | {ms:.3f} |" for w, label, ms in rows],
    )


if __name__ == "__main__":
    main()
