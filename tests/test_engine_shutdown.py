"""Closing the vLLM engine: what vLLM logs while we shut it down ourselves."""

from __future__ import annotations

import logging

import pytest


def test_vllms_shutdown_race_traceback_is_left_out_only_while_we_shut_it_down(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """vLLM issue 48745: its output handler may log the core's going as a death while shutdown stops it."""
    from extractor.engines.vllm import quiet_shutdown

    logger = logging.getLogger("vllm.v1.engine.async_llm")
    with caplog.at_level(logging.ERROR, logger="vllm.v1.engine.async_llm"):
        with quiet_shutdown():
            logger.error("AsyncLLM output_handler failed.")
            logger.error("something else went wrong")
        logger.error("AsyncLLM output_handler failed.")  # outside a shutdown: a real death, logged
    assert [r.getMessage() for r in caplog.records] == ["something else went wrong", "AsyncLLM output_handler failed."]
