"""OCR of a PDF page through Debian's tesseract: the page drawn, its words read, each word's box and confidence.

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
import io
import math
import os
import shutil
import subprocess
from dataclasses import dataclass

import pypdfium2 as pdfium

from extractor.documents.lines import NO_BOX, Lines, wide
from extractor.documents.model import Ocr
from extractor.errors import DocumentError, OcrUnavailableError

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


@dataclass(frozen=True)
class Placement:
    """How a drawn page's pixels map back to points in the page's unrotated frame (the text layer's)."""

    scale: float  # pixels per point
    rotation: int  # the page's /Rotate, applied by the renderer
    width: float  # the unrotated crop box, in points
    height: float

    def box(self, x0: float, y0: float, x1: float, y1: float) -> tuple[float, float, float, float]:
        """A box in the drawn image's pixels as points relative to the unrotated crop box's top-left corner."""
        a, b, c, d = x0 / self.scale, y0 / self.scale, x1 / self.scale, y1 / self.scale
        if self.rotation == 90:  # drawn turned clockwise: a drawn (X, Y) is (Y, height - X) unrotated
            a, b, c, d = b, self.height - c, d, self.height - a
        elif self.rotation == 180:
            a, b, c, d = self.width - c, self.height - d, self.width - a, self.height - b
        elif self.rotation == 270:
            a, b, c, d = self.width - d, a, self.width - b, c
        return (a, b, c, d)


def draw(page: pdfium.PdfPage, *, ocr: Ocr) -> tuple[bytes, Placement]:
    """The page drawn upright in grey for OCR, as PGM bytes, at ``ocr.dpi`` (its longer side bounded).

    PDFium is not thread-safe: the caller holds :data:`extractor.documents.pdf.PDFIUM_LOCK`.
    """
    width, height = page.get_size()
    scale = min(ocr.dpi / 72, ocr.max_pixels / max(width, height, 1.0))
    if not math.isfinite(scale) or scale <= 0:
        raise DocumentError("a page has no drawable size")
    image = page.render(scale=scale, grayscale=True).to_pil()
    rotation = page.get_rotation()
    left, bottom, right, top = page.get_cropbox()
    buffer = io.BytesIO()
    image.convert("L").save(buffer, format="PPM")
    return buffer.getvalue(), Placement(scale, rotation, right - left, top - bottom)


def add_words(text: Lines, words: list[Word], placement: Placement, page: int) -> None:
    """OCR's words as text: a space between words (none between CJK), a line break between lines.

    Lines join as a text layer's do, except that tesseract's paragraphs, not the gaps between lines,
    make the newlines (its boxes are the ink's, tighter than a font's, so every gap looks wide).
    Each character gets an equal slice of its word's width (tesseract boxes words, not characters),
    and the word's confidence. A line's last word ending in a hyphen is joined to the next line's
    first, as PDFium's line-end hyphens are.
    """
    previous: Word | None = None
    for i, word in enumerate(words):
        chars = word.text
        line_end = i + 1 == len(words) or words[i + 1].line != word.line
        hyphen = line_end and len(chars) > 1 and chars[-1] in "-\u00ad\u2010" and chars[-2].isalpha()
        if hyphen:
            chars = chars[:-1]
        if previous is not None and previous.line != word.line:
            text.end_line(page)
            if previous.line[:2] != word.line[:2]:
                text.paragraph = True  # another block or paragraph
            else:
                text.last = None  # the next line of the paragraph: no gap measured
        elif previous is not None and not (wide(text.out[-1]) and wide(chars[0])):
            text.add(" ", NO_BOX, page)
        x0, y0, x1, y1 = word.box
        step = (x1 - x0) / len(word.text)
        for k, char in enumerate(chars):
            text.add(char, placement.box(x0 + k * step, y0, x0 + (k + 1) * step, y1), page, word.confidence)
        if hyphen:
            text.end_line(page)
            text.joined = True
        previous = word
