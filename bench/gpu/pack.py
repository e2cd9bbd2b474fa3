"""Packs the files of one folder into ``.vp1`` … ``.vpN``, each small enough to travel with the working tree.

The device tool moves at most 64 MiB per call, the working tree (tracked and untracked files) included:
each part gets what is left, less 1 MiB. Files larger than that are cut into ``NAME.part00``, ``NAME.part01``
… (``bench/gpu/install.sh`` joins them); the rest are packed largest first into the first part with room.

    python3 bench/gpu/pack.py FOLDER        # from the project's root; prints each part's size
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

LIMIT, MARGIN = 64 << 20, 1 << 20


def tree_bytes() -> int:
    """What travels anyway: tracked files and untracked files git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], capture_output=True, check=True
    ).stdout
    return sum(Path(p).stat().st_size for p in listed.decode().split("\0") if p and Path(p).is_file())


def cut(path: Path, size: int) -> list[Path]:
    """``path`` in pieces of at most ``size`` bytes, beside it; the original is removed."""
    pieces = []
    with path.open("rb") as source:
        while chunk := source.read(size):
            piece = path.with_name(f"{path.name}.part{len(pieces):02d}")
            piece.write_bytes(chunk)
            pieces.append(piece)
    path.unlink()
    return pieces


def main(folder: Path) -> None:
    budget = LIMIT - tree_bytes() - MARGIN
    if budget < 8 << 20:
        sys.exit(f"the working tree leaves {budget >> 20} MiB per call: too little to stage through")
    files = []
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        files += cut(path, budget) if path.stat().st_size > budget else [path]
    for old in Path(".").glob(".vp[0-9]*"):
        shutil.rmtree(old)
    parts: list[tuple[list[Path], int]] = []
    for path in sorted(files, key=lambda p: -p.stat().st_size):
        size = path.stat().st_size
        index = next((i for i, (_, used) in enumerate(parts) if used + size <= budget), len(parts))
        if index == len(parts):
            parts.append(([], 0))
        parts[index][0].append(path)
        parts[index] = (parts[index][0], parts[index][1] + size)
    for number, (members, used) in enumerate(parts, 1):
        target = Path(f".vp{number}")
        target.mkdir()
        for path in members:
            shutil.move(str(path), target / path.name)
        print(f"{target}: {used / (1 << 20):.1f} MiB, {len(members)} files")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
