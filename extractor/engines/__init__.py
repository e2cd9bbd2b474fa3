"""Generation engines behind one narrow, async, batch-friendly interface.

Heavy backends (vLLM, torch) are imported only when :func:`create_engine` builds them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from extractor.engines.base import Engine, Generation, GenerationRequest, Message, StreamingEngine, stream_text
from extractor.engines.scripted import ScriptedEngine

if TYPE_CHECKING:
    from extractor.config import Settings

__all__ = [
    "Engine",
    "Generation",
    "GenerationRequest",
    "Message",
    "ScriptedEngine",
    "StreamingEngine",
    "create_engine",
    "stream_text",
]


def create_engine(settings: Settings) -> Engine:
    """Build the engine the settings name (not started yet)."""
    if settings.engine == "scripted":
        return ScriptedEngine.echo_examples(delay_s=settings.scripted_delay_s)
    if settings.engine == "remote":
        from extractor.engines.remote import RemoteEngine

        return RemoteEngine(settings)
    from extractor.engines.vllm import VLLMEngine

    return VLLMEngine(settings)
