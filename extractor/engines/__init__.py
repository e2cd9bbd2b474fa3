"""Generation engines behind one narrow, async, batch-friendly interface.

Heavy backends (vLLM, torch) are imported only when :func:`create_engine` builds them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from extractor.engines.base import Engine, Generation, GenerationRequest, Message, StreamingEngine, stream_text
from extractor.engines.scripted import ScriptedEngine

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

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


def create_engine(settings: Settings, adapters: Sequence[Path] = (), *, share: int = 1) -> Engine:
    """Build the engine the settings name (not started yet).

    ``adapters``: the catalog's adapters, each served by a merged model of its own beside the base
    model (:mod:`extractor.engines.merged`; in-process vLLM only). ``share``: how many engines of
    other models share the machine with this one (tasks that name a model of their own).
    """
    if settings.engine == "scripted":
        return ScriptedEngine.echo_examples(delay_s=settings.scripted_delay_s)
    if settings.engine == "remote":
        from extractor.engines.remote import RemoteEngine

        return RemoteEngine(settings)
    if adapters:
        from extractor.engines.merged import MergedAdapters

        return MergedAdapters(settings, adapters, share=share)
    from extractor.engines.process import vllm_engine

    return vllm_engine(settings, share=share)
