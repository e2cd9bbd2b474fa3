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
2 CPU cores.

:func:`install` wraps vLLM's check so that it returns at once for a request that :func:`mark`
marked (``SamplingParams.extra_args``, which vLLM leaves to plugins and carries through its copies:
vLLM 0.32 checks on a worker thread, where the sender's context does not reach) and runs as before
for anything else in the process. A constraint the engine core could not compile leaves llguidance's
matcher in error, which allows only the stop token: the answer comes back empty, and
:func:`rejection` then runs the check vLLM skipped, so the caller gets the error it would have got
up front.
"""

from __future__ import annotations

from typing import Any

KEY = "extractor_checked"  # in SamplingParams.extra_args: this request's constraint was checked by extractor
SKIP = True  # bench.gpu_bench --recheck sets False: vLLM's check as before, for an A-B on one host


def install() -> None:
    """Wrap vLLM's per-request grammar check (idempotent; vLLM imports it at each call, so this reaches it)."""
    from vllm.v1.structured_output import backend_guidance

    check = backend_guidance.validate_guidance_grammar
    if getattr(check, "extractor_wrapped", None) is not None:
        return

    def validate_guidance_grammar(sampling_params: Any, tokenizer: Any = None) -> None:
        if SKIP and marked(sampling_params):
            return
        check(sampling_params, tokenizer=tokenizer)

    validate_guidance_grammar.extractor_wrapped = check  # type: ignore[attr-defined]
    backend_guidance.validate_guidance_grammar = validate_guidance_grammar


def mark(sampling_params: Any) -> Any:
    """The same parameters, marked: their constraint comes from extractor, which has checked it."""
    sampling_params.extra_args = {**(sampling_params.extra_args or {}), KEY: True}
    return sampling_params


def marked(sampling_params: Any) -> bool:
    """Whether :func:`mark` marked these parameters (vLLM's copies of them included)."""
    return bool((getattr(sampling_params, "extra_args", None) or {}).get(KEY))


def rejection(sampling_params: Any) -> str | None:
    """Why vLLM's check refuses this request's constraint (None: it compiles), asked after an empty answer."""
    from vllm.v1.structured_output import backend_guidance

    check = backend_guidance.validate_guidance_grammar
    check = getattr(check, "extractor_wrapped", check)
    try:
        check(sampling_params, tokenizer=None)
    except Exception as error:  # noqa: BLE001 - VLLMValidationError: a ValueError in 0.26, not in 0.32
        return str(error)
    return None
