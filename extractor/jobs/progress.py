"""Progress of a long run: a redrawn bar on a terminal, plain periodic lines elsewhere."""

from __future__ import annotations

import sys
import time
from typing import TextIO


def format_duration(seconds: float) -> str:
    """``3h05m``, ``2m18s`` or ``42s``."""
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class Progress:
    """Rows done out of a total, docs/s, errors and ETA.

    On a terminal the bar is redrawn in place (at most ten times a second); when the stream
    is not a terminal (a log file, CI) one plain line is printed every ``interval_s``.
    """

    def __init__(
        self, *, label: str = "batch", stream: TextIO | None = None, tty: bool | None = None, interval_s: float = 10.0
    ) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.interval_s = interval_s if not self.tty else 0.1
        self.start(total=0)

    def start(self, *, total: int, done: int = 0, errors: int = 0) -> None:
        """Begin counting: ``total`` rows, ``done`` of them (``errors`` failed) done before this run."""
        self.total = total
        self._start_done = self.done = done
        self.errors = errors
        self._started = time.monotonic()
        self._last = 0.0 if self.tty else self._started

    def update(self, *, done: int = 0, errors: int = 0) -> None:
        """Count ``done`` more rows (``errors`` of them failed) and redraw when due."""
        self.done += done
        self.errors += errors
        now = time.monotonic()
        if now - self._last >= self.interval_s:
            self._last = now
            self._draw()

    @property
    def rate(self) -> float:
        """Rows per second in this run (rows skipped at start excluded)."""
        elapsed = time.monotonic() - self._started
        return (self.done - self._start_done) / elapsed if elapsed > 0 else 0.0

    def line(self) -> str:
        """The status as one line of text."""
        rate = self.rate
        left = max(0, self.total - self.done)
        eta = format_duration(left / rate) if rate > 0 else "?"
        percent = 100 * self.done / self.total if self.total else 100.0
        status = f"{self.done}/{self.total} rows ({percent:.0f}%)  {rate:.2f} docs/s  {self.errors} errors  ETA {eta}"
        if not self.tty:
            return f"{self.label}: {status}"
        width = 24
        filled = round(width * self.done / self.total) if self.total else width
        return f"{self.label} [{'#' * filled}{'.' * (width - filled)}] {status}"

    def _draw(self) -> None:
        if self.tty:
            self.stream.write("\r\033[K" + self.line())
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()

    def finish(self) -> None:
        """Draw the final state and end the bar's line."""
        self._draw()
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
