"""vLLM's per-request grammar check: skipped for extractor's checked constraints, the same error when one fails."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from extractor import Extractor
from extractor.engines.base import GenerationRequest
from extractor.engines.vllm import CHECKED, mark, rejection
from extractor.errors import EngineError
from extractor.vllm_plugins import checks

BROKEN = "start: missing\n"  # a rule that is never defined: llguidance refuses it


def params(grammar: str) -> Any:
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    return SamplingParams(structured_outputs=StructuredOutputsParams(grammar=grammar))


def check(sampling_params: Any) -> None:
    from vllm.v1.structured_output import backend_guidance

    backend_guidance.validate_guidance_grammar(sampling_params)


def test_the_check_is_skipped_only_for_marked_requests() -> None:
    checks.install()
    checks.install()  # idempotent: one wrapper around vLLM's own
    with pytest.raises(Exception, match="missing"):
        check(params(BROKEN))
    marked = mark(params(BROKEN))
    check(marked)
    check(marked.clone())  # vLLM checks its own copy
    check(params('start: "yes" | "no"\n'))


def test_mark_keeps_other_extra_args() -> None:
    from vllm import SamplingParams

    marked = mark(SamplingParams(extra_args={"theirs": 1}))
    assert marked.extra_args == {"theirs": 1, CHECKED: True}
    assert not checks.marked(SamplingParams())


def test_rejection_names_what_vllm_would_have_refused() -> None:
    checks.install()
    refused = rejection(mark(params(BROKEN)))
    assert refused is not None and "missing" in refused
    assert rejection(mark(params('start: "yes"\n'))) is None


@pytest.mark.engine
def test_a_refused_grammar_is_named_and_the_engine_goes_on(real_extractor: Extractor) -> None:
    engine = real_extractor.engine
    messages = [{"role": "user", "content": "Say yes."}]

    async def both() -> tuple[BaseException | None, str]:
        failed: BaseException | None = None
        try:
            await engine.generate(GenerationRequest(messages=messages, grammar=BROKEN, max_tokens=8))
        except EngineError as error:
            failed = error
        after = await engine.generate(
            GenerationRequest(messages=messages, grammar='start: "yes" | "no"\n', max_tokens=8, temperature=0.0)
        )
        return failed, after.text

    failed, after = asyncio.run(both())
    # vLLM's own check did not run (it would have said "vLLM generation failed"); the engine core's did
    assert (
        failed is not None
        and str(failed).startswith("vLLM refused the request's constraint")
        and "missing" in str(failed)
    )
    assert after in {"yes", "no"}
