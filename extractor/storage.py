"""Durable writes: a file replaced all at once, a folder's new entries synced.

A crash at any moment leaves either the old file or the new one, never a part of either
(:func:`write_atomic`); a file created or renamed survives a power cut once its folder is synced
(:func:`fsync_dir`). The batch journal (:mod:`extractor.jobs.journal`), pools, calibrations and
exports use them.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` all at once: a temp file beside it, fsync, rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    """Make a file's creation or rename in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
