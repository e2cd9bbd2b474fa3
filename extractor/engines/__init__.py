"""Generation engines behind one narrow, async, batch-friendly interface.

Heavy backends (vLLM, torch) are imported only when :func:`create_engine` builds them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from extractor.engines.base import Engine, Generation, GenerationRequest, Message
from extractor.engines.scripted import ScriptedEngine

if TYPE_CHECKING:
    from extractor.config import Settings

__all__ = ["Engine", "Generation", "GenerationRequest", "Message", "ScriptedEngine", "create_engine"]


def create_engine(settings: Settings) -> Engine:
    """Build the engine the settings name (not started yet)."""
    if settings.engine == "scripted":
        return ScriptedEngine.echo_examples()
    from extractor.engines.vllm import VLLMEngine

    return VLLMEngine(settings)
