"""Documents from the command line and in batches: `extract --file report.pdf`, `batch TASK FOLDER OUT.jsonl`."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from extractor import Catalog, Extractor, ScriptedEngine, Settings
from extractor.config import repo_root
from extractor.jobs.batch import BatchConfig, run_batch

from .conftest import landmark
from .documents import LANDMARK_TEXT, PERIOD, Printed, docx_bytes, landmark_html, landmark_pages, printer

EIFFEL = "埃菲尔铁塔位于法国巴黎，建于十九世纪末。"  # landmark_slots' first example: the dry run's answer


@pytest.fixture(scope="module")
def pdfs() -> tuple[Printed, Printed]:
    with printer() as chromium:
        return chromium.print_pages(landmark_pages()), chromium.print_pages(["<p>Intro.</p>", f"<p>{EIFFEL}</p>"])


def test_extract_file_pdf_prints_locations(tmp_path: Path, pdfs: tuple[Printed, Printed]) -> None:
    path = tmp_path / "eiffel.pdf"
    path.write_bytes(pdfs[1].pdf)
    tasks = tmp_path / "tasks"  # landmark_slots with its fixed examples only: the dry run answers the first
    for folder, name in (("schemas", "landmark_slots.json"), ("prompts", "landmark_slots.j2")):
        (tasks / folder).mkdir(parents=True)
        shutil.copy(repo_root() / folder / name, tasks / folder)
    command = [sys.executable, "-m", "extractor.cli", "extract", "landmark_slots", "--file", str(path)]
    done = subprocess.run(
        [*command, "--engine", "scripted", "--home", str(tmp_path / "home"), "--tasks-dir", str(tasks)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    span = next(s for s in result["spans"] if s["path"] == "/period")
    assert result["data"]["period"] == "十九世纪末" and span["location"]["pages"] == [2]
    assert result["document"]["name"] == "eiffel.pdf"


def test_batch_over_a_folder_one_record_per_file(
    catalog: Catalog, settings: Settings, tmp_path: Path, pdfs: tuple[Printed, Printed]
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.pdf").write_bytes(pdfs[0].pdf)
    (folder / "b.docx").write_bytes(docx_bytes(["Granada.", LANDMARK_TEXT]))
    (folder / "c.html").write_bytes(landmark_html())
    (folder / "d.txt").write_text(LANDMARK_TEXT, encoding="utf-8")
    (folder / "e.pdf").write_bytes(b"%PDF-1.7 cut")
    (folder / "f.png").write_bytes(b"\x89PNG\r\n\x1a\n0000")
    (folder / ".hidden").write_text("x")
    engine = ScriptedEngine(respond=lambda request: landmark(name="阿尔罕布拉宫", period=PERIOD))
    out = tmp_path / "out.jsonl"
    config = BatchConfig(task="landmark_slots", input=folder, output=out, concurrency=2)
    summary = asyncio.run(run_batch(Extractor(settings=settings, engine=engine, catalog=catalog), config))
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    by_id = {r["id"]: r for r in records}
    assert sorted(by_id) == ["a.pdf", "b.docx", "c.html", "d.txt", "e.pdf", "f.png"]
    assert summary.ok == 4 and summary.failed == 2
    located = {
        name: next(s for s in by_id[name]["result"]["spans"] if s["path"] == "/period")["location"]
        for name in ("a.pdf", "b.docx", "c.html")
    }
    assert located["a.pdf"]["pages"] == [2] and located["b.docx"]["paragraphs"] == [1]
    assert located["c.html"]["elements"] == ["/html/body/div/p[2]/b"]
    assert by_id["e.pdf"]["error"]["kind"] == "bad_document"
    assert (
        by_id["f.png"]["error"]["kind"] == "bad_document" and "cannot read a .png" in by_id["f.png"]["error"]["message"]
    )
    # resumable as any batch: a second run writes nothing new
    again = asyncio.run(run_batch(Extractor(settings=settings, engine=engine, catalog=catalog), config))
    assert again.written == 0 and again.skipped == 6
