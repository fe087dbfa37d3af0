"""A one-line progress bar on stderr for work that takes minutes (tokenizing a corpus).

Drawn only when stderr is a terminal: redirected to a file or a CI log, carriage-return redraws would be
noise, and the command prints its summary on stdout anyway. No dependency: a bar, a percentage, the
amount done and the rate, redrawn at most ten times a second.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO

_REDRAW_SECONDS = 0.1
_WIDTH = 24


def _amount(n: float) -> str:
    for unit in ("", "k", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n:.1f}{unit}" if unit else f"{n:.0f}"
        n /= 1000
    return f"{n:.1f}P"


class Progress:
    """``with Progress("tokenizing", total_bytes, "B") as bar: bar.advance(n)``."""

    def __init__(self, label: str, total: int, unit: str = "B", *, stream: TextIO | None = None,
                 enabled: bool | None = None) -> None:
        self.label = label
        self.total = max(0, total)
        self.unit = unit
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self._start = time.monotonic()
        self._drawn = 0.0

    def advance(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.enabled and now - self._drawn >= _REDRAW_SECONDS:
            self._drawn = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        fraction = min(1.0, self.done / self.total) if self.total else 0.0
        filled = int(fraction * _WIDTH)
        rate = self.done / max(now - self._start, 1e-9)
        line = (f"\r{self.label} {fraction:4.0%} |{'#' * filled}{' ' * (_WIDTH - filled)}| "
                f"{_amount(self.done)}/{_amount(self.total)} {self.unit} {_amount(rate)} {self.unit}/s")
        self.stream.write(line)
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self._draw(time.monotonic())
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
