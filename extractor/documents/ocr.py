"""OCR of a drawn page through Debian's tesseract: its words, each with a box in points and a confidence.

The ``tesseract`` command line, not a Python binding: pytesseract (the maintained wrapper) runs
the same command through temporary files and parses the same TSV, and tesserocr binds the C++
API, a build against libtesseract-dev. Run directly, the image goes in on stdin (a PGM: no
encoding cost), the TSV comes back on stdout, the process is killed at the page's timeout, and
``OMP_THREAD_LIMIT=1`` keeps it on one core (tesseract's OpenMP threads cost more than they save
on a shared machine). Nothing is downloaded: the languages are Debian's packages
(``tesseract-ocr-eng``, ``tesseract-ocr-chi-sim``), checked once per process.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import dataclass

from extractor.errors import OcrUnavailableError

TESSERACT = "tesseract"
PACKAGES = "tesseract-ocr tesseract-ocr-eng tesseract-ocr-chi-sim"


@dataclass(frozen=True)
class Word:
    """One word tesseract read: its text, its confidence (0-1), its box in pixels of the image, and its line."""

    text: str
    confidence: float
    box: tuple[float, float, float, float]
    line: tuple[int, int, int]  # block, paragraph and line numbers: words of one line share them


def package_of(language: str) -> str:
    """Debian's package for a tesseract language code (chi_sim -> tesseract-ocr-chi-sim)."""
    return "tesseract-ocr-" + language.replace("_", "-")


@functools.lru_cache(maxsize=1)
def installed_languages() -> frozenset[str]:
    """The languages tesseract has (``tesseract --list-langs``); an error naming the packages when it is missing."""
    if shutil.which(TESSERACT) is None:
        raise OcrUnavailableError(
            f"a page needs OCR and tesseract is not installed: apt-get install {PACKAGES} "
            "(`make setup-ocr`), or set EXTRACTOR_OCR=off"
        )
    listed = subprocess.run(
        [TESSERACT, "--list-langs"], capture_output=True, text=True, timeout=30, check=False, env=_environment()
    )
    # the first line names the folder ("List of available languages in ..."), then one code a line
    return frozenset(line.strip() for line in listed.stdout.splitlines()[1:] if line.strip())


def check(languages: str) -> None:
    """An :class:`OcrUnavailableError` naming the package of each language tesseract lacks."""
    missing = [code for code in languages.split("+") if code not in installed_languages()]
    if missing:
        packages = " ".join(package_of(code) for code in missing)
        raise OcrUnavailableError(
            f"tesseract has no {'+'.join(missing)} language data: apt-get install {packages}, "
            "or set EXTRACTOR_OCR_LANGUAGES to the installed ones (tesseract --list-langs)"
        )


def _environment() -> dict[str, str]:
    return {**os.environ, "OMP_THREAD_LIMIT": "1"}


def recognize(image: bytes, *, languages: str, dpi: int, timeout_s: float) -> list[Word] | None:
    """The words of ``image`` (PGM or PNG bytes) in reading order; None when tesseract ran past ``timeout_s``."""
    check(languages)
    command = [TESSERACT, "stdin", "stdout", "-l", languages, "--dpi", str(dpi), "--psm", "3", "tsv"]
    try:
        done = subprocess.run(
            command, input=image, capture_output=True, timeout=timeout_s, check=False, env=_environment()
        )
    except subprocess.TimeoutExpired:
        return None  # subprocess.run killed it
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        raise OcrUnavailableError(f"tesseract failed on a page: {detail[0][:300]}")
    return parse_tsv(done.stdout.decode("utf-8", "replace"))


def parse_tsv(tsv: str) -> list[Word]:
    """Tesseract's TSV (level, page, block, par, line, word, left, top, width, height, conf, text) -> its words."""
    words: list[Word] = []
    for row in tsv.splitlines()[1:]:
        cells = row.split("\t")
        if len(cells) < 12 or cells[0] != "5":  # level 5: a word (1-4: page, block, paragraph, line)
            continue
        text = cells[11].strip()
        if not text:
            continue
        left, top, width, height = (float(c) for c in cells[6:10])
        confidence = max(0.0, min(1.0, float(cells[10]) / 100))
        line = (int(cells[2]), int(cells[3]), int(cells[4]))
        words.append(Word(text, confidence, (left, top, left + width, top + height), line))
    return words
