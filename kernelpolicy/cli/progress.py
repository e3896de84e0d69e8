"""``kernelpolicy verify``'s progress on stderr: one line redrawn in place on a terminal
(checks done / total, the implementation running, an ETA); anywhere else a "verifying X ..."
line per implementation and, while one runs long, a line of the checks done and the ETA every
``LOG_EVERY_SECONDS``, so that a CI log shows a slow run moving (the torch sampler's checks take
minutes on a busy machine) and a quick one stays as it was.

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
LOG_EVERY_SECONDS = 30.0
"""Without a terminal: the least time between two lines of the checks done."""


class _Tally:
    """Checks done of the total, and the ETA: the time per check that ran so far times the
    checks left. The checks of an implementation that will not run here are taken off the
    total (and said at the end, with why), so neither the count nor the ETA claims them."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._start = clock()
        self._total = self._done = self._skipped = 0
        self._why: dict[str, list[str]] = {}  # why -> the implementations skipped for it
        self._label = ""

    def begin(self, total: int) -> None:
        self._start, self._total = self._clock(), total

    def target(self, feature: str, impl: str) -> None:
        self._label = f"{feature}/{impl}"

    def check(self, outcome: Outcome) -> None:
        self._done += 1

    def skipped(self, checks: int, impl: str, why: str) -> None:
        self._total -= checks
        self._skipped += checks
        impls = self._why.setdefault(why, [])
        if impl not in impls:
            impls.append(impl)

    def eta(self) -> str:
        if not self._done:
            return "-:--"
        per_check = (self._clock() - self._start) / self._done
        return _clock_time(per_check * (self._total - self._done))

    def counts(self) -> str:
        return f"[{self._done}/{self._total}] {self._label}  ETA {self.eta()}"

    def summary(self) -> str:
        """``N/M checks done in m:ss``, then the checks that did not run here and why:
        ``; 375 skipped (flashinfer, triton: needs a CUDA device; aiter: needs a ROCm device)``."""
        elapsed = _clock_time(self._clock() - self._start)
        line = f"{self._done}/{self._total} checks done in {elapsed}"
        if not self._skipped:
            return line
        why = "; ".join(f"{', '.join(impls)}: {why}" for why, impls in self._why.items())
        return f"{line}; {self._skipped} skipped ({why})"


class LineProgress(_Tally):
    """One "verifying FEATURE/IMPL ..." line per implementation; while one runs, the checks done
    and the ETA at most every ``every`` seconds; at the end, what was done if anything was said
    in between (a quick run prints exactly what it always did)."""

    def __init__(
        self, stream: TextIO, clock: Clock = time.monotonic, every: float = LOG_EVERY_SECONDS
    ) -> None:
        super().__init__(clock)
        self._stream = stream
        self._every = every
        self._said = clock()
        self._counted = False

    def target(self, feature: str, impl: str) -> None:
        super().target(feature, impl)
        self._said = self._clock()
        self._print(f"verifying {feature}/{impl} ...")

    def check(self, outcome: Outcome) -> None:
        super().check(outcome)
        if self._clock() - self._said >= self._every:
            self._said = self._clock()
            self._counted = True
            self._print(f"  {self.counts()}")

    def close(self) -> None:
        if self._counted:
            self._print(self.summary())

    def _print(self, line: str) -> None:
        print(line, file=self._stream, flush=True)


class TerminalProgress(_Tally):
    """``[done/total] FEATURE/IMPL  ETA m:ss`` redrawn in place, then one closing line."""

    def __init__(self, stream: TextIO, width: int, clock: Clock = time.monotonic) -> None:
        super().__init__(clock)
        self._stream = stream
        self._width = width
        self._open = False

    def begin(self, total: int) -> None:
        super().begin(total)
        self._draw()

    def target(self, feature: str, impl: str) -> None:
        super().target(feature, impl)
        self._draw()

    def check(self, outcome: Outcome) -> None:
        super().check(outcome)
        self._draw()

    def skipped(self, checks: int, impl: str, why: str) -> None:
        super().skipped(checks, impl, why)
        self._draw()

    def close(self) -> None:
        """End the line: what was done, and in how long (also after an interrupt)."""
        if not self._open:
            return
        self._write(f"{_ERASE}{self.summary()}\n")
        self._open = False

    def _draw(self) -> None:
        line = self.counts()
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
