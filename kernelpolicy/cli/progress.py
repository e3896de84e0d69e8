"""``kernelpolicy verify``'s progress on stderr: one line redrawn in place on a terminal
(checks done / total, the implementation running, an ETA), the plain "verifying X ..." lines
anywhere else, so logs and CI output stay as they were.

Which of the two is decided once, from the stream, by :func:`for_stream`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TextIO

from kernelpolicy.evidence.model import Outcome

Clock = Callable[[], float]
_ERASE = "\r\x1b[K"  # back to the start of the line, clear to its end


class LineProgress:
    """One "verifying FEATURE/IMPL ..." line per implementation, as before the display."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def begin(self, total: int) -> None:
        pass

    def target(self, feature: str, impl: str) -> None:
        print(f"verifying {feature}/{impl} ...", file=self._stream, flush=True)

    def check(self, outcome: Outcome) -> None:
        pass

    def skipped(self, checks: int) -> None:
        pass

    def close(self) -> None:
        pass


class TerminalProgress:
    """``[done/total] FEATURE/IMPL  ETA m:ss`` redrawn in place, then one closing line.

    The ETA is the time per check that ran so far times the checks left; the checks of a
    skipped implementation count as done but not as time spent, so they do not speed it up.
    """

    def __init__(self, stream: TextIO, width: int, clock: Clock = time.monotonic) -> None:
        self._stream = stream
        self._clock = clock
        self._width = width
        self._start = clock()
        self._total = self._done = self._ran = 0
        self._label = ""
        self._open = False

    def begin(self, total: int) -> None:
        self._start, self._total = self._clock(), total
        self._draw()

    def target(self, feature: str, impl: str) -> None:
        self._label = f"{feature}/{impl}"
        self._draw()

    def check(self, outcome: Outcome) -> None:
        self._done += 1
        self._ran += 1
        self._draw()

    def skipped(self, checks: int) -> None:
        self._done += checks
        self._draw()

    def close(self) -> None:
        """End the line: what was done, and in how long (also after an interrupt)."""
        if not self._open:
            return
        elapsed = _clock_time(self._clock() - self._start)
        self._write(f"{_ERASE}{self._done}/{self._total} checks done in {elapsed}\n")
        self._open = False

    def eta(self) -> str:
        if not self._ran:
            return "-:--"
        per_check = (self._clock() - self._start) / self._ran
        return _clock_time(per_check * (self._total - self._done))

    def _draw(self) -> None:
        line = f"[{self._done}/{self._total}] {self._label}  ETA {self.eta()}"
        # a line longer than the terminal wraps, and "\r" would only go back to its last row
        self._write(_ERASE + line[: max(self._width - 1, 1)])
        self._open = True

    def _write(self, text: str) -> None:
        self._stream.write(text)
        self._stream.flush()


def _clock_time(seconds: float) -> str:
    """``m:ss`` (``h:mm:ss`` from an hour)."""
    minutes, secs = divmod(round(max(seconds, 0.0)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def for_stream(stream: TextIO) -> LineProgress | TerminalProgress:
    """The display for ``stream``: redrawn in place only on a terminal."""
    if stream.closed or not stream.isatty():
        return LineProgress(stream)
    try:
        width = os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError):  # a terminal that reports no size; a stream with no descriptor
        width = 0
    return TerminalProgress(stream, width or 80)
