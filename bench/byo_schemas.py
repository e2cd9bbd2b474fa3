"""Bring your own schema: how many real-world schemas load as tasks, as a new user would try them.

Each schema under ``bench/data/byo_schemas/<source>/`` becomes a task as it is (no edit, no
``x-extractor``) with a one-line prompt, and is loaded by the catalog's own checks on the
``guidance`` backend; the engine schema of each task that loads is then compiled the way vLLM's
guidance backend compiles it (``serialize_guidance_grammar`` + ``LLMatcher.validate_grammar`` with
the default model's tokenizer), so "loads" means "vLLM accepts its requests". Each is tried first
under ``"x-extractor": {"strict_enforcement": true}`` (every keyword enforced while decoding), then
as it is: by default a keyword the grammar cannot enforce is checked after generation, with a load
warning. Reported: how many load with every keyword enforced, how many with some checked after
generation, how many are refused, with the reasons counted, per source and draft.

    python -m bench.byo_schemas            # writes bench/results/byo_schemas.{md,json}
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from extractor.catalog.tasks import load_task
from extractor.errors import TaskError

DATA = Path(__file__).parent / "data" / "byo_schemas"
RESULTS = Path(__file__).parent / "results"
PROMPT = "Extract {{ task.title }} from the text below as one JSON value.\n"


def try_load(root: Path, name: str, schema: Any) -> tuple[str, str | None, list[str]]:
    """``(outcome, reason, unenforced keywords)``: outcome is ``plain``, ``allow_unenforced`` or ``refused``."""
    strict = {**schema, "x-extractor": {**schema.get("x-extractor", {}), "strict_enforcement": True}}
    error = _load(root, name, strict if isinstance(schema, dict) else schema)
    if error is None:
        return "plain", None, []
    if isinstance(error, str):
        return "refused", error, []
    keyword = _unenforced(error.reason)
    if keyword is None or not isinstance(schema, dict):
        return "refused", _reason(error), []
    second = _load(root, name, schema)
    if second is not None:
        return "refused", second if isinstance(second, str) else _reason(second), []
    return "allow_unenforced", None, _keywords(error.reason)


def _load(root: Path, name: str, schema: Any) -> TaskError | str | None:
    """The load error; or, for a task that loads, why vLLM would refuse its engine schema (None: it compiles)."""
    (root / "schemas" / f"{name}.json").write_text(json.dumps(schema), encoding="utf-8")
    try:
        task = load_task(root / "schemas" / f"{name}.json", root / "prompts", backend="guidance")
    except TaskError as error:
        return error
    try:  # an output is checked by the schema's own draft validator: it must not crash on one
        list(task.validator.iter_errors({}))
    except Exception as error:  # noqa: BLE001 - any crash is the finding
        return f"loads, but validating an output crashes: {type(error).__name__}"
    return _vllm_refusal(dict(task.engine_schema))


def _vllm_refusal(engine_schema: dict[str, Any]) -> str | None:
    """What vLLM's guidance backend says of the schema it would be sent (its own code path, real tokenizer)."""
    import llguidance
    from vllm.v1.structured_output.backend_guidance import serialize_guidance_grammar
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    grammar = serialize_guidance_grammar(StructuredOutputOptions.JSON, engine_schema, disable_any_whitespace=True)
    error = llguidance.LLMatcher.validate_grammar(grammar, _tokenizer())
    return f"loads, but vLLM refuses its engine schema: {error[:80]}" if error else None


@functools.cache
def _tokenizer() -> Any:
    import llguidance.hf
    from transformers import AutoTokenizer

    from extractor.config import Settings
    from extractor.models import default_model_dir

    return llguidance.hf.from_tokenizer(AutoTokenizer.from_pretrained(str(default_model_dir(Settings.from_env({})))))


def _unenforced(reason: str) -> str | None:
    # Read from the message alone, so the same script measures an older checkout (PYTHONPATH=...).
    found = re.search(r"does not enforce '([^']+)'", reason)
    return found.group(1) if found else None


def _keywords(reason: str) -> list[str]:
    first = _unenforced(reason)
    more = re.findall(r"/([A-Za-z$]+)(?=,|\))", reason.split("and ", 1)[1]) if " more: " in reason else []
    return [k for k in [first, *more] if k]


def _reason(error: TaskError) -> str:
    keyword = _unenforced(error.reason)
    if keyword is not None:
        return f"unenforced {keyword}"
    return re.sub(r"'[^']*'|\"[^\"]*\"|\d+", "…", error.reason.split(":")[0])[:80]


def _draft(schema: Any) -> str:
    """The draft as declared (``$schema``), or ``none`` (each is read as its own draft by the catalog)."""
    declared = str(schema.get("$schema", "none")) if isinstance(schema, dict) else "not an object"
    for marker, name in (("draft-04", "draft-04"), ("draft-06", "draft-06"), ("draft-07", "draft-07")):
        if marker in declared:
            return name
    if "2019-09" in declared or "2020-12" in declared:
        return declared.rsplit("/", 2)[-2]
    if "iglucentral" in declared:
        return "iglu self-desc (draft-04)"
    return "json-schema.org/schema# (unversioned)" if "json-schema.org/schema" in declared else declared


def run(data: Path) -> dict[str, Any]:
    rows = []
    _vllm_refusal({"type": "object"})  # import vLLM and load the tokenizer before the clock starts
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "schemas").mkdir()
        (root / "prompts").mkdir()
        for path in sorted(data.glob("*/*.json")):
            name = re.sub(r"[^a-z0-9_-]", "_", f"{path.parent.name}_{path.stem}".lower())[:64]
            (root / "prompts" / f"{name}.j2").write_text(PROMPT, encoding="utf-8")
            schema = json.loads(path.read_text(encoding="utf-8"))
            t0 = time.perf_counter()
            outcome, reason, unenforced = try_load(root, name, schema)  # vLLM's check included
            rows.append(
                {
                    "file": str(path.relative_to(data)),
                    "source": path.parent.name,
                    "draft": _draft(schema),
                    "top": _top(schema),
                    "outcome": outcome,
                    "reason": reason,
                    "unenforced": unenforced,
                    "load_ms": round((time.perf_counter() - t0) * 1000, 1),
                }
            )
    return {"rows": rows}


def _top(schema: Any) -> str:
    if not isinstance(schema, dict):
        return "not an object"
    kind = schema.get("type")
    if kind == "object" or (kind is None and "properties" in schema):
        return "object"
    if kind is None:
        return next((k for k in ("anyOf", "oneOf", "allOf", "$ref", "enum") if k in schema), "untyped")
    return str(kind)


def report(result: dict[str, Any]) -> str:
    rows = result["rows"]
    total = len(rows)
    count = collections.Counter(r["outcome"] for r in rows)
    allowed = count["allow_unenforced"]
    loaded = count["plain"] + allowed
    lines = [
        "# Bring your own schema: real-world schemas loaded as tasks",
        "",
        f"`python -m bench.byo_schemas`: {total} schemas from `bench/data/byo_schemas/` (sources and licences in its",
        "README), each a task as it is with a one-line prompt, loaded by the catalog on the guidance backend",
        "(llguidance as installed); a task counts as loaded only if vLLM's guidance backend then compiles its",
        "engine schema (`serialize_guidance_grammar` + `validate_grammar`, default model's tokenizer) and its",
        "validator runs on an output.",
        "",
        "| outcome | schemas | share |",
        "|---|---|---|",
        f"| loads, every keyword enforced while decoding | {count['plain']} | {count['plain'] / total:.1%} |",
        f"| loads, some keywords checked after generation (refused under `strict_enforcement`) | {allowed} "
        f"| {allowed / total:.1%} |",
        f"| refused | {count['refused']} | {count['refused'] / total:.1%} |",
        f"| **loads as it is (the default)** | **{loaded}** | **{loaded / total:.1%}** |",
        "",
        "Per source and per draft (enforced / checked after generation / refused):",
        "",
        "| group | enforced | after generation | refused |",
        "|---|---|---|---|",
    ]
    for key in ("source", "draft", "top"):
        for group in sorted({r[key] for r in rows}):
            c = collections.Counter(r["outcome"] for r in rows if r[key] == group)
            lines.append(f"| {key} {group} | {c['plain']} | {c['allow_unenforced']} | {c['refused']} |")
    reasons = collections.Counter(r["reason"] for r in rows if r["reason"])
    lines += ["", "Refusal reasons:", "", "| reason | schemas |", "|---|---|"]
    lines += [f"| {reason} | {n} |" for reason, n in reasons.most_common()] or ["| (none) | 0 |"]
    needed = collections.Counter(k for r in rows for k in set(r["unenforced"]))
    lines += ["", "Keywords checked after generation only (schemas naming each):", "", "| keyword | schemas |"]
    lines += ["|---|---|"] + [f"| `{k}` | {n} |" for k, n in needed.most_common()]
    times = sorted(r["load_ms"] for r in rows)
    lines += [
        "",
        f"Load time per task (the catalog's checks, then vLLM's compile of the engine schema): median "
        f"{times[total // 2]:.0f} ms, max {times[-1]:.0f} ms.",
        "",
    ]
    lines += ["Refused schemas:", ""] + [f"- `{r['file']}`: {r['reason']}" for r in rows if r["outcome"] == "refused"]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, default=RESULTS / "byo_schemas")
    parser.add_argument("--label", default="", help="a note on the checkout measured, for the report's title")
    args = parser.parse_args()
    result = run(args.data)
    text = report(result).replace("as tasks\n", f"as tasks{' (' + args.label + ')' if args.label else ''}\n", 1)
    if args.data.resolve() != DATA.resolve():
        text = text.replace("`bench/data/byo_schemas/`", f"`{args.data}/`", 1)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    args.out.with_suffix(".md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
