"""Documents converted in worker processes (EXTRACTOR_CONVERSION_PROCESSES): the same documents, the same errors."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

from extractor import Extractor, ScriptedEngine, Settings, documents
from extractor.documents import Limits
from extractor.documents.converting import Converter
from extractor.errors import DocumentError, DocumentTooLargeError

from .documents import docx_bytes

PARAGRAPHS = ["Made by and between Acme Widgets, Inc. and Beta Labs LLC.", "Governed by the laws of Delaware."]


class Unstartable:
    """A pool whose workers cannot start: what a spawned worker does when the main module cannot be imported again."""

    def __init__(self, *_: object, **__: object) -> None:
        pass

    def submit(self, *_: object, **__: object) -> Future[object]:
        broken: Future[object] = Future()
        broken.set_exception(BrokenProcessPool("a child process terminated abruptly"))
        return broken

    def shutdown(self, **_: object) -> None:
        pass


def _die(source: object, **_: object) -> None:
    """What a crash inside a converting library does to its process."""
    os._exit(3)


@pytest.fixture(scope="module")
def converter() -> object:
    running = Converter(2)
    yield running
    running.close()


def test_a_document_converted_in_a_worker_process_is_the_one_a_thread_converts(
    converter: Converter, tmp_path: Path
) -> None:
    data = docx_bytes(PARAGRAPHS)
    (tmp_path / "c.docx").write_bytes(data)
    here = documents.read(data, limits=Limits())
    there = asyncio.run(converter.convert(data, limits=Limits()))
    assert there.text.startswith("Made by and between Acme")
    assert (there.text, there.segments, there.media_type) == (here.text, here.segments, here.media_type)
    by_path = asyncio.run(converter.read(tmp_path / "c.docx", limits=Limits()))  # the worker reads the file
    assert by_path.text == here.text and by_path.name == "c.docx"


def test_a_bad_document_keeps_its_error_and_message_across_the_process(converter: Converter) -> None:
    with pytest.raises(DocumentError, match="not a readable PDF"):
        asyncio.run(converter.convert(b"%PDF-1.4 nothing more", media_type="application/pdf", limits=Limits()))
    with pytest.raises(DocumentTooLargeError, match="EXTRACTOR_MAX_DOCUMENT_CHARS"):
        asyncio.run(converter.convert(docx_bytes(PARAGRAPHS * 50), limits=Limits(max_chars=100)))


def test_a_worker_that_dies_fails_its_document_and_the_next_one_converts() -> None:
    converter = Converter(1)
    try:
        with pytest.raises(DocumentError, match=r"c\.pdf: the process converting it died"):
            asyncio.run(converter._run(_die, b"", name="c.pdf"))  # a crash cannot be sent any other way
        again = asyncio.run(converter.convert(docx_bytes(PARAGRAPHS), limits=Limits()))
        assert again.text.startswith("Made by")
    finally:
        converter.close()


def test_the_extractor_converts_in_its_processes_and_locates_the_values(tmp_path: Path) -> None:
    (tmp_path / "c.docx").write_bytes(docx_bytes(PARAGRAPHS))
    settings = Settings.from_env({}, engine="scripted", conversion_processes=1)
    answer = '{"name": null, "country": "Delaware", "city": null, "category": null, "period": null}'
    engine = ScriptedEngine(respond=lambda _: answer)

    async def run() -> object:
        async with Extractor(settings=settings, engine=engine) as extractor:
            result = await extractor.aextract_document("landmark_slots", tmp_path / "c.docx")
            assert extractor.converter.processes == 1
            return result

    result = asyncio.run(run())
    assert result.document is not None and result.document.name == "c.docx"
    assert result.data["country"] == "Delaware"
    span = next(s for s in result.spans if s.path == "/country")
    assert span.location is not None and span.location.paragraphs == [1]  # the DOCX's second paragraph


def test_the_default_count_is_half_the_cores_of_a_large_machine_and_none_on_a_small_one() -> None:
    from extractor.config import default_conversion_processes

    assert [default_conversion_processes(n) for n in (1, 2, 4, 7, 8, 16, 64)] == [0, 0, 0, 0, 4, 8, 8]
    assert Settings.from_env({}).conversion_workers == default_conversion_processes()
    assert Settings.from_env({"EXTRACTOR_CONVERSION_PROCESSES": "0"}).conversion_workers == 0


def test_a_negative_count_is_refused() -> None:
    with pytest.raises(Exception, match="CONVERSION_PROCESSES"):
        Settings.from_env({}, conversion_processes=-1)


def test_workers_that_cannot_start_name_the_setting_not_the_document(monkeypatch: pytest.MonkeyPatch) -> None:
    from extractor.documents import converting
    from extractor.errors import ConfigError

    monkeypatch.setattr(converting, "ProcessPoolExecutor", Unstartable)
    with pytest.raises(ConfigError, match=r"EXTRACTOR_CONVERSION_PROCESSES.*could not start"):
        asyncio.run(Converter(1).convert(docx_bytes(PARAGRAPHS), limits=Limits()))


def test_a_document_sent_while_the_workers_start_waits_for_them_and_names_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from concurrent.futures import Future
    from concurrent.futures.process import BrokenProcessPool

    from extractor.documents import converting
    from extractor.errors import ConfigError

    submitted: list[Future[object]] = []

    class SlowToFail:  # workers still starting when the second document arrives, then found unable to
        def __init__(self, *_: object, **__: object) -> None:
            pass

        def submit(self, *_: object, **__: object) -> Future[object]:
            submitted.append(Future())
            return submitted[-1]

        def shutdown(self, **_: object) -> None:
            pass

    monkeypatch.setattr(converting, "ProcessPoolExecutor", SlowToFail)
    converter = Converter(2)

    async def both() -> list[object]:
        sent = [asyncio.ensure_future(converter.convert(docx_bytes(PARAGRAPHS), limits=Limits())) for _ in range(2)]
        await asyncio.sleep(0.05)
        assert len(submitted) == 2  # only the start checks, one a worker: no document went to a worker not started
        for future in submitted:
            future.set_exception(BrokenProcessPool("a child process terminated abruptly"))
        return await asyncio.gather(*sent, return_exceptions=True)

    outcomes = asyncio.run(both())
    assert all(isinstance(o, ConfigError) and "EXTRACTOR_CONVERSION_PROCESSES" in str(o) for o in outcomes), outcomes


def test_a_count_the_machine_chose_falls_back_to_a_thread_when_its_workers_cannot_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from extractor import config
    from extractor.documents import converting

    monkeypatch.setattr(converting, "ProcessPoolExecutor", Unstartable)
    monkeypatch.setattr(config, "default_conversion_processes", lambda cores=None: 4)  # a large machine's default
    (tmp_path / "c.docx").write_bytes(docx_bytes(PARAGRAPHS))
    answer = '{"name": null, "country": "Delaware", "city": null, "category": null, "period": null}'

    async def run(settings: Settings) -> object:
        async with Extractor(settings=settings, engine=ScriptedEngine(respond=lambda _: answer)) as extractor:
            first = await extractor.aextract_document("landmark_slots", tmp_path / "c.docx")
            await extractor.aextract_document("landmark_slots", tmp_path / "c.docx")  # no second attempt to start
            assert extractor.converter.processes == 0
            return first

    with caplog.at_level(logging.WARNING, logger="extractor.documents"):
        result = asyncio.run(run(Settings.from_env({}, engine="scripted")))
    assert result.data["country"] == "Delaware"  # type: ignore[attr-defined]
    warned = [r.getMessage() for r in caplog.records if "could not start" in r.getMessage()]
    assert len(warned) == 1 and "EXTRACTOR_CONVERSION_PROCESSES=0" in warned[0]
    from extractor.errors import ConfigError

    with pytest.raises(ConfigError, match="EXTRACTOR_CONVERSION_PROCESSES"):  # a count the user set is kept to
        asyncio.run(run(Settings.from_env({}, engine="scripted", conversion_processes=4)))


def test_a_batch_of_documents_starts_every_worker_with_the_engine_not_at_its_first_document() -> None:
    settings = Settings.from_env({}, engine="scripted", conversion_processes=2)
    before = set(multiprocessing.active_children())

    async def run(documents: bool) -> int:
        async with Extractor(settings=settings, engine=ScriptedEngine(respond=lambda _: "{}")) as extractor:
            await extractor.astart(documents=documents)
            started = [p for p in multiprocessing.active_children() if p not in before and p.is_alive()]
            await extractor.astart(documents=documents)  # idempotent: no second pool
            assert len([p for p in multiprocessing.active_children() if p not in before]) == len(started)
            return len(started)

    assert asyncio.run(run(documents=False)) == 0  # texts only: no worker, as before
    assert asyncio.run(run(documents=True)) == 2  # both workers up before any document
