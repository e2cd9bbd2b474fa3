"""OCR of scanned PDF pages (issue 47, item 4): pages/s on this machine's cores, accuracy, Kleister-NDA's PDFs.

    python -m bench.experiments.ocr   # synthetic scans + Kleister-NDA train/dev (~3 min on 2 cores)
    python -m bench.experiments.ocr --kleister ''   # synthetic scans only

Scans are drawn as the tests draw them (``tests.documents.scanned_pdf``: Pillow, 12 pt text at
300 dpi, saved as image-only PDFs), full pages of English contract prose or Chinese. Each page
is converted through ``documents.read`` (PDFium draws it, tesseract reads it on one core);
"workers" is how many of a document's pages tesseract reads at once (EXTRACTOR_OCR_WORKERS).
The Kleister-NDA PDFs (``../shared/eval/kleister_nda/{train,dev}``, never copied here) are
converted with ``EXTRACTOR_OCR`` auto and off; only names and counts are written.
Results: ``bench/results/ocr.md`` and ``ocr.json``.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

from rapidfuzz.distance import Levenshtein

from bench.common import RESULTS, publish
from bench.kleister import DATA as KLEISTER
from extractor import documents
from extractor.documents import Limits, Ocr
from tests.documents import scanned_pdf

CLAUSE = (
    "The Receiving Party shall hold and maintain the Confidential Information in strictest confidence for the "
    "sole and exclusive benefit of the Disclosing Party, and shall not, without the prior written approval of "
    "the Disclosing Party, use for its own benefit, publish, copy, or otherwise disclose to others any "
    "Confidential Information. This Agreement shall be governed by the laws of the State of Delaware and shall "
    "remain in effect for a period of three (3) years from the Effective Date of May 1, 2009. "
)
CLAUSE_ZH = (
    "接收方应严格保密机密信息，仅为披露方的利益使用，未经披露方事先书面同意，不得为自身利益使用、公布、复制或以其他方式"
    "向他人披露任何机密信息。本协议受特拉华州法律管辖，自二零零九年五月一日生效日起三年内有效。"
)


def english_page() -> list[str]:
    return textwrap.wrap(CLAUSE * 5, 60)[:30]


def chinese_page() -> list[str]:
    text = CLAUSE_ZH * 8
    return [text[i : i + 30] for i in range(0, 30 * 30, 30)]


def accuracy(document: documents.Document, drawn: list[list[str]]) -> float:
    """1 - the character error rate (Levenshtein distance over the characters drawn), page by page, spaces left out."""
    errors = 0
    for number, lines in enumerate(drawn, start=1):
        read = "".join(document.text[s.start : s.end] for s in document.segments if s.page == number)
        want = "".join(lines)
        errors += Levenshtein.distance(read.replace(" ", ""), want.replace(" ", ""))
    return round(1 - errors / sum(len("".join(lines).replace(" ", "")) for lines in drawn), 3)


def measure(label: str, pages: list[list[str]], ocr: Ocr) -> dict[str, Any]:
    """Pages/s of converting ``pages`` drawn as one scanned PDF."""
    pdf = scanned_pdf(pages).pdf
    limits = Limits(ocr=ocr)
    documents.read(scanned_pdf(pages[:1]).pdf, limits=limits)  # tesseract's data in the page cache
    started = time.perf_counter()
    document = documents.read(pdf, limits=limits)
    seconds = time.perf_counter() - started
    confidences = [c for c in (document.confidences or []) if c == c]
    row = {
        "scan": label,
        "languages": ocr.languages,
        "dpi": ocr.dpi,
        "workers": ocr.workers,
        "pages": len(pages),
        "seconds": round(seconds, 2),
        "pages_per_s": round(len(pages) / seconds, 2),
        "s_per_page": round(seconds / len(pages), 2),
        "accuracy": accuracy(document, pages),
        "mean_confidence": round(sum(confidences) / len(confidences), 3) if confidences else None,
    }
    print(row, flush=True)
    return row


def kleister(folder: Path) -> dict[str, Any]:
    """Every train/dev PDF converted with OCR auto and off: which have pages without text, what OCR read, the time."""
    rows: list[dict[str, Any]] = []
    totals = {"documents": 0, "pages": 0, "seconds_auto": 0.0, "seconds_off": 0.0}
    for split in ("train", "dev"):
        for path in sorted((folder / split).glob("*.pdf")):
            data = path.read_bytes()
            started = time.perf_counter()
            documents.read(data, limits=Limits(ocr=Ocr(mode="off")))
            middle = time.perf_counter()
            auto = documents.read(data)
            ended = time.perf_counter()
            totals["documents"] += 1
            totals["pages"] += len(auto.pages)
            totals["seconds_off"] += middle - started
            totals["seconds_auto"] += ended - middle
            if auto.ocr_pages:
                ocr_chars = sum(1 for c in (auto.confidences or []) if c == c)
                rows.append(
                    {
                        "split": split,
                        "document": path.name,
                        "pages": len(auto.pages),
                        "ocr_pages": list(auto.ocr_pages),
                        "characters_ocr": ocr_chars,
                        "seconds_auto": round(ended - middle, 2),
                        "seconds_off": round(middle - started, 3),
                        "notes": list(auto.notes),
                    }
                )
                print(rows[-1], flush=True)
    ocr_pages = sum(len(r["ocr_pages"]) for r in rows)
    ocr_seconds = sum(r["seconds_auto"] - r["seconds_off"] for r in rows)
    return {
        "documents": totals["documents"],
        "pages": totals["pages"],
        "documents_ocr": len(rows),
        "pages_ocr": ocr_pages,
        "characters_ocr": sum(r["characters_ocr"] for r in rows),
        "seconds_auto": round(totals["seconds_auto"], 2),
        "seconds_off": round(totals["seconds_off"], 2),
        "ocr_seconds_per_page": round(ocr_seconds / ocr_pages, 2) if ocr_pages else None,
        "rows": rows,
    }


def markdown(report: dict[str, Any]) -> str:
    """The results page."""
    lines = [
        "# OCR of scanned pages",
        "",
        f"`python -m bench.experiments.ocr` on {report['machine']}, tesseract {report['tesseract']}, {report['date']}; "
        f"load average at the start {report['load']} (a shared machine). Each page: PDFium draws it in grey at "
        "the dpi, tesseract (`OMP_THREAD_LIMIT=1`, `--psm 3`, TSV) reads it; the conversion's own cost included. "
        "The 23-page contract is the issue's long document, scanned. Accuracy: 1 - the character error rate "
        "(Levenshtein distance over the characters drawn, spaces left out).",
        "",
        "| scan | languages | dpi | workers | pages | s | pages/s | s/page | accuracy | mean word confidence |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["synthetic"]:
        lines.append(
            f"| {r['scan']} | {r['languages']} | {r['dpi']} | {r['workers']} | {r['pages']} | {r['seconds']} | "
            f"**{r['pages_per_s']}** | {r['s_per_page']} | {r['accuracy']} | {r['mean_confidence']} |"
        )
    lines += ["", f"tesseract's peak memory (the largest child process's RSS): {report['child_peak_mib']} MiB.", ""]
    k = report.get("kleister")
    if k:
        lines += [
            "## Kleister-NDA train and dev",
            "",
            f"{k['documents']} PDFs, {k['pages']} pages: {k['documents_ocr']} documents have pages without a text "
            f"layer, {k['pages_ocr']} pages OCR'd ({k['characters_ocr']} characters read). All converted in "
            f"{k['seconds_auto']} s with `EXTRACTOR_OCR=auto` against {k['seconds_off']} s with `off`; "
            f"{k['ocr_seconds_per_page']} s of OCR per OCR'd page.",
            "",
            "| split | document | pages | OCR'd pages | characters OCR read | s auto | s off |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in k["rows"]:
            pages = ", ".join(map(str, r["ocr_pages"]))
            lines.append(
                f"| {r['split']} | {r['document']} | {r['pages']} | {pages} | {r['characters_ocr']} "
                f"| {r['seconds_auto']} | {r['seconds_off']} |"
            )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description="OCR of scanned PDF pages: pages/s, accuracy, Kleister-NDA")
    parser.add_argument("--pages", type=int, default=4, help="pages per synthetic scan")
    parser.add_argument("--kleister", default=str(KLEISTER), help="Kleister-NDA's folder ('' to skip)")
    parser.add_argument("--out", type=Path, default=RESULTS / "ocr.md")
    args = parser.parse_args()
    english, chinese = [english_page()] * args.pages, [chinese_page()] * args.pages
    version = subprocess.run(["tesseract", "--version"], capture_output=True, text=True, check=True).stdout
    report: dict[str, Any] = {
        "machine": f"{os.cpu_count()} CPU cores ({platform.machine()})",
        "tesseract": version.split()[1],
        "date": time.strftime("%Y-%m-%d"),
        "load": round(os.getloadavg()[0], 2),
        "synthetic": [
            measure("English", english, Ocr(workers=1)),
            measure("English", english, Ocr(languages="eng", workers=1)),
            measure("English", english, Ocr(languages="chi_sim+eng", workers=1)),
            measure("English", english, Ocr(dpi=200, workers=1)),
            measure("Chinese", chinese, Ocr(workers=1)),
            measure("Chinese", chinese, Ocr(languages="chi_sim", workers=1)),
            measure("Chinese", chinese, Ocr(languages="chi_sim+eng", workers=1)),
            measure("English", english, Ocr()),
            measure("English, a 23-page contract", [english_page()] * 23, Ocr()),
        ],
    }
    if args.kleister:
        report["kleister"] = kleister(Path(args.kleister))
    report["child_peak_mib"] = round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)
    publish(markdown(report), args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
