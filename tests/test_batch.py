"""`extractor batch`: one record per input line, bad rows included; resumable; crash-safe."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from extractor import Catalog, EngineError, Extractor, ScriptedEngine, Settings
from extractor.engines.base import Generation, GenerationRequest
from extractor.errors import ExtractorError
from extractor.jobs.batch import BatchConfig, run_batch, summary_path
from extractor.jobs.journal import Journal
from extractor.jobs.progress import Progress
from extractor.jobs.rows import BadRow, input_rows, reads_documents
from extractor.options import ExtractOptions

from .conftest import LANDMARK_TEXT, landmark

GOOD = landmark(name="阿尔罕布拉宫", country="西班牙", category="宫殿建筑")


def answer(request: GenerationRequest) -> str:
    """Valid for every text except those containing FAIL, which never validate."""
    return '{"name": 5}' if "FAIL" in request.messages[-1]["content"] else GOOD


def write_lines(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def row(**fields: Any) -> bytes:
    return json.dumps(fields, ensure_ascii=False).encode()


def read_records(path: Path) -> list[dict[str, Any]]:
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), "the output ends in a cut line"
    return [json.loads(line) for line in data.splitlines()]


def make_extractor(catalog: Catalog, settings: Settings, engine: ScriptedEngine) -> Extractor:
    return Extractor(settings=settings, engine=engine, catalog=catalog)


def test_every_bad_row_kind_gets_exactly_one_record(catalog: Catalog, settings: Settings, tmp_path: Path) -> None:
    lines = [
        row(id="ok-1", text=LANDMARK_TEXT),  # 1
        b'{"id": "broken", "text": ',  # 2 invalid JSON
        b'{"id": "bytes", "text": "caf\xe9"}',  # 3 invalid UTF-8 (latin-1 byte)
        b"   ",  # 4 blank
        b"[1, 2]",  # 5 not an object
        row(id=1.5, text="x"),  # 6 bad id
        row(id="no-text", body="x"),  # 7 missing text
        row(id="num", text=42),  # 8 text not a string
        row(id="empty", text="  "),  # 9 empty text
        row(id="ok-1", text="dup"),  # 10 duplicate id
        row(id="huge", text="x" * 6000),  # 11 over --max-chars
        row(id="window", text="长" * 4000),  # 12 under max-chars but over the model window
        row(id="fails", text="FAIL " + LANDMARK_TEXT),  # 13 no valid answer in 3 attempts
        row(text=LANDMARK_TEXT),  # 14 no id: the line number is the id
    ]
    source = write_lines(tmp_path / "in.jsonl", lines)
    out = tmp_path / "out.jsonl"
    engine = ScriptedEngine(respond=answer, max_model_len=1024)
    no_chunks = ExtractOptions(chunk=False)  # line 12 is refused, not chunked
    config = BatchConfig(
        task="landmark_slots", input=source, output=out, max_chars=5000, concurrency=4, options=no_chunks
    )

    summary = asyncio.run(run_batch(make_extractor(catalog, settings, engine), config))

    records = read_records(out)
    assert sorted(r["line"] for r in records) == list(range(1, len(lines) + 1))
    by_line = {r["line"]: r for r in records}
    kinds = {n: r["error"]["kind"] for n, r in by_line.items() if not r["ok"]}
    assert kinds == {
        2: "invalid_json",
        3: "invalid_utf8",
        4: "blank_line",
        5: "not_an_object",
        6: "bad_id",
        7: "missing_text",
        8: "bad_text",
        9: "empty_text",
        10: "duplicate_id",
        11: "text_too_long",
        12: "text_too_long",
        13: "extraction_failed",
    }
    assert by_line[1]["ok"] and by_line[1]["id"] == "ok-1" and by_line[1]["result"]["data"]["country"] == "西班牙"
    assert by_line[14]["ok"] and by_line[14]["id"] == 14
    assert by_line[10]["id"] == "ok-1" and by_line[7]["id"] == "no-text" and by_line[2]["id"] is None
    assert "5000" in by_line[11]["error"]["message"] and "window" in by_line[12]["error"]["message"]
    assert len(by_line[13]["attempts"]) == 3  # a failed extraction keeps every attempt
    assert all(r["error"]["message"] for r in records if not r["ok"])
    # only rows that can be extracted reach the engine: 1, 13 (three attempts) and 14
    assert len(engine.history) == 5
    assert (summary.rows, summary.ok, summary.failed, summary.written) == (14, 2, 12, 14)
    assert summary.attempts == 5 and summary.extracted == 3 and summary.complete
    saved = json.loads(summary_path(out).read_text())
    assert saved["rows"] == 14 and saved["errors_by_kind"]["text_too_long"] == 2
    # Where each row's time went, and the sums in the summary (issue 58).
    assert {"rendering", "tokenizing", "grammar", "engine", "reading"} <= set(by_line[1]["stages"])
    assert set(saved["stages"]) >= set(by_line[1]["stages"]) and "seconds by stage" in summary.text()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_resume_skips_written_rows_and_drops_a_cut_line(catalog: Catalog, settings: Settings, tmp_path: Path) -> None:
    lines = [row(id=f"r{i}", text=f"{LANDMARK_TEXT} {i}") for i in range(8)]
    lines.insert(3, row(id="r1", text="again"))  # line 4 repeats id r1
    lines.insert(5, b"not json")  # line 6
    source = write_lines(tmp_path / "in.jsonl", lines)
    out = tmp_path / "out.jsonl"
    config = BatchConfig(task="landmark_slots", input=source, output=out)
    asyncio.run(run_batch(make_extractor(catalog, settings, ScriptedEngine(respond=answer)), config))
    full = read_records(out)
    # Keep a part, as a kill would: r0's result, the duplicate's error, and half of a line.
    kept = [r for r in full if r["id"] == "r0" or r["line"] == 4]
    out.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in kept) + b'{"id": "r5", "li')

    engine = ScriptedEngine(respond=answer)
    summary = asyncio.run(run_batch(make_extractor(catalog, settings, engine), config))

    records = read_records(out)
    assert sorted(r["line"] for r in records) == list(range(1, len(lines) + 1))
    assert len(engine.history) == 7  # r1..r7: not r0, and no engine call for bad lines
    assert (summary.skipped, summary.written, summary.rows) == (2, 8, 10)
    assert sorted(str(r["id"]) for r in records if r["ok"]) == [f"r{i}" for i in range(8)]


def test_engine_failure_stops_and_keeps_finished_rows(catalog: Catalog, settings: Settings, tmp_path: Path) -> None:
    lines = [row(id=i, text=f"{LANDMARK_TEXT} {i}") for i in range(6)]
    source = write_lines(tmp_path / "in.jsonl", lines)
    out = tmp_path / "out.jsonl"
    config = BatchConfig(task="landmark_slots", input=source, output=out, concurrency=1)

    def flaky(request: GenerationRequest) -> str:
        if f"{LANDMARK_TEXT} 3" in request.messages[-1]["content"]:
            raise EngineError("connection refused")
        return GOOD

    with pytest.raises(EngineError, match="run the same command to resume"):
        asyncio.run(run_batch(make_extractor(catalog, settings, ScriptedEngine(respond=flaky)), config))
    assert [r["id"] for r in read_records(out)] == [0, 1, 2]  # the failed row is not marked done

    asyncio.run(run_batch(make_extractor(catalog, settings, ScriptedEngine(respond=answer)), config))
    assert sorted(r["id"] for r in read_records(out)) == list(range(6))


class CountingEngine(ScriptedEngine):
    """Records how many generate calls run at once."""

    def __init__(self) -> None:
        super().__init__(respond=answer, delay_s=0.01)
        self.active = self.peak = 0

    async def generate(self, request: GenerationRequest) -> Generation:
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            return await super().generate(request)
        finally:
            self.active -= 1


def test_in_flight_requests_are_bounded(catalog: Catalog, settings: Settings, tmp_path: Path) -> None:
    source = write_lines(tmp_path / "in.jsonl", [row(id=i, text=f"{LANDMARK_TEXT}{i}") for i in range(20)])
    engine = CountingEngine()
    config = BatchConfig(task="landmark_slots", input=source, output=tmp_path / "out.jsonl", concurrency=3)
    asyncio.run(run_batch(make_extractor(catalog, settings, engine), config))
    assert engine.peak == 3  # kept full, never over
    assert len(read_records(config.output)) == 20


def test_a_batch_input_is_a_folder_of_documents_or_a_file_of_lines(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "b.txt").write_text("two", encoding="utf-8")
    (folder / "a.pdf").write_bytes(b"%PDF-1.4")
    (folder / ".hidden").write_text("left out", encoding="utf-8")
    lines = tmp_path / "in.jsonl"
    lines.write_text('{"id": "x", "text": "one"}\nnot json\n', encoding="utf-8")
    documents = list(input_rows(folder))
    assert [(row.id, row.document) for row in documents] == [("a.pdf", folder / "a.pdf"), ("b.txt", folder / "b.txt")]
    read = list(input_rows(lines))
    assert read[0].id == "x" and read[0].document is None and isinstance(read[1], BadRow)
    assert reads_documents([lines, folder]) and not reads_documents([lines])


def test_second_writer_is_refused(catalog: Catalog, settings: Settings, tmp_path: Path) -> None:
    source = write_lines(tmp_path / "in.jsonl", [row(id=1, text=LANDMARK_TEXT)])
    config = BatchConfig(task="landmark_slots", input=source, output=tmp_path / "out.jsonl")
    with Journal(config.output), pytest.raises(ExtractorError, match="another process is writing"):
        asyncio.run(run_batch(make_extractor(catalog, settings, ScriptedEngine(respond=answer)), config))


def test_output_that_is_not_a_batch_file_is_refused(catalog: Catalog, settings: Settings, tmp_path: Path) -> None:
    source = write_lines(tmp_path / "in.jsonl", [row(id=1, text=LANDMARK_TEXT)])
    out = tmp_path / "out.jsonl"
    out.write_text('{"something": "else"}\n')
    config = BatchConfig(task="landmark_slots", input=source, output=out)
    with pytest.raises(ExtractorError, match="line 1 is not a batch record"):
        asyncio.run(run_batch(make_extractor(catalog, settings, ScriptedEngine(respond=answer)), config))
    assert out.read_text() == '{"something": "else"}\n'


def test_progress_plain_lines_off_a_terminal_and_a_bar_on_one() -> None:
    plain = io.StringIO()
    progress = Progress(stream=plain, tty=False, interval_s=0)
    progress.start(total=10, done=2, errors=1)
    progress.update(done=3, errors=1)
    line = plain.getvalue().splitlines()[-1]
    assert line.startswith("batch: 5/10 rows (50%)") and "docs/s" in line and "2 errors" in line and "ETA" in line

    bar = io.StringIO()
    progress = Progress(stream=bar, tty=True)
    progress.start(total=4)
    progress.update(done=4)
    progress.finish()
    assert "\r" in bar.getvalue() and "[########################]" in bar.getvalue()


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "extractor.cli", "batch", *args, "--engine", "scripted"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def test_sigkill_mid_run_then_resume_writes_every_id_once(tmp_path: Path) -> None:
    ids = [f"doc-{i}" for i in range(400)]
    lines = [row(id=i, text=f"{LANDMARK_TEXT} ({i})") for i in ids]
    lines[50] = b"{bad json"  # bad rows are part of the file's accounting too
    source = write_lines(tmp_path / "in.jsonl", lines)
    out = tmp_path / "out.jsonl"
    args = ("landmark_slots", str(source), str(out), "--concurrency", "4", "--progress-interval", "0.2")

    # Each answer takes 20 ms, 4 at a time: the run would take about 2 s; kill it midway.
    first = cli(*args, env={"EXTRACTOR_SCRIPTED_DELAY_S": "0.02"})
    deadline = time.monotonic() + 60
    while not out.exists() or out.read_bytes().count(b"\n") < 40:
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline, "the batch wrote nothing"
        time.sleep(0.01)
    first.send_signal(signal.SIGKILL)
    first.communicate()
    assert first.returncode == -signal.SIGKILL
    partial = read_records(out)  # whole lines only
    assert 40 <= len(partial) < len(lines)

    second = cli(*args)
    stdout, stderr = second.communicate(timeout=120)
    assert second.returncode == 0, stderr
    records = read_records(out)
    assert sorted(r["line"] for r in records) == list(range(1, len(lines) + 1))
    written = [r["id"] for r in records if r["ok"]]
    assert sorted(written) == sorted(i for n, i in enumerate(ids) if n != 50)
    assert [r["error"]["kind"] for r in records if not r["ok"]] == ["invalid_json"]
    assert f"rows {len(lines)}: ok {len(lines) - 1}, failed 1" in stdout
    assert "batch:" in stderr  # plain progress lines, stderr is not a terminal
    assert json.loads(summary_path(out).read_text())["skipped"] == len(partial)


def test_cli_unknown_task_fails_before_reading(tmp_path: Path) -> None:
    done = cli("no_such_task", str(tmp_path / "missing.jsonl"), str(tmp_path / "out.jsonl"))
    _, stderr = done.communicate(timeout=60)
    assert done.returncode == 2 and "unknown task 'no_such_task'" in stderr
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.engine
def test_batch_on_the_real_engine(real_extractor: Extractor, tmp_path: Path) -> None:
    lines = [
        row(id="weather", text="will it snow in Denver tomorrow"),
        b"oops",
        row(id="music", text="play the top-20 Ramin Djawadi album on Deezer"),
    ]
    source = write_lines(tmp_path / "in.jsonl", lines)
    config = BatchConfig(task="snips_get_weather", input=source, output=tmp_path / "out.jsonl")
    summary = asyncio.run(run_batch(real_extractor, config))
    records = {r["line"]: r for r in read_records(config.output)}
    assert sorted(records) == [1, 2, 3] and records[2]["error"]["kind"] == "invalid_json"
    for line in (1, 3):  # constrained decoding: each is a valid result (or, at worst, a recorded failure)
        assert records[line]["ok"] or records[line]["error"]["kind"] == "extraction_failed"
    assert records[1]["ok"] and records[1]["result"]["model"]
    assert summary.extracted == 2 and summary.completion_tokens > 0
