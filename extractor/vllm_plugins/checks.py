"""vLLM's check of each request's grammar, skipped for the constraints extractor has checked already.

vLLM's ``guidance`` backend compiles every structured request's grammar with llguidance on the
thread that feeds the engine, to see that it compiles (``validate_guidance_grammar``), and the
engine core compiles it again to decode with it. extractor's constraints are checked before they
get there: a task's schema when the catalog loads it (``constraints.enforcement`` asks llguidance),
an OpenAI client's schema when its ad-hoc task is built, and the grounded grammars come from one
tested builder (``constraints.substring``). The second check then only costs time, and in the
process extractor shares with vLLM's front end: on the H200 it was 160 of the 240 py-spy samples of
the feeding thread while ``POST /extract`` ran at 200 documents a second
(``bench/results/raw/gpu-pyspy-http-ids.txt``), 1.5 ms a grounded request and 0.25 ms a schema on
2 CPU cores; skipping it took constrained output 1.2-1.45x on the H200 (``bench/results/gpu.md``).

:func:`install` wraps vLLM's check so that it returns at once for a request the engine marked
(``extractor.engines.vllm.mark``: a key in ``SamplingParams.extra_args``, which vLLM leaves to
plugins and carries through its copies: vLLM 0.32 checks on a worker thread, where the sender's
context does not reach) and runs as before for anything else in the process. vLLM loads the plugin
in its front end too (``EngineArgs`` loads the general plugins), where the check runs. A constraint
the engine core could not compile leaves llguidance's matcher in error, which allows only the stop
token: the answer comes back empty, and ``extractor.engines.vllm.rejection`` then runs the check
vLLM skipped (kept as ``UNWRAPPED`` on the wrapper), so the caller gets the error it would have got
up front.
"""

from __future__ import annotations

from typing import Any

from extractor.engines.vllm import CHECKED, UNWRAPPED

SKIP = True  # False: vLLM's check as before (the A-B of 2026-12-03 set it: bench/results/mask_fill.md)


def marked(sampling_params: Any) -> bool:
    """Whether the engine marked these parameters (vLLM's copies of them included)."""
    return bool((getattr(sampling_params, "extra_args", None) or {}).get(CHECKED))


def install() -> tuple[bool, str]:
    """Wrap vLLM's per-request grammar check (idempotent; vLLM imports it at each call, so this reaches it)."""
    try:
        from vllm.v1.structured_output import backend_guidance
    except ImportError as error:  # another vLLM layout: its check stays
        return False, f"vLLM's guidance backend not found ({error})"
    done = "vLLM's second grammar check skipped for extractor's checked constraints"
    check = backend_guidance.validate_guidance_grammar
    if getattr(check, UNWRAPPED, None) is not None:
        return True, done

    def validate_guidance_grammar(sampling_params: Any, tokenizer: Any = None) -> None:
        if SKIP and marked(sampling_params):
            return
        check(sampling_params, tokenizer=tokenizer)

    setattr(validate_guidance_grammar, UNWRAPPED, check)
    backend_guidance.validate_guidance_grammar = validate_guidance_grammar
    return True, done
