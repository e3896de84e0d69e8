"""Logging that no client can turn into a flood: a bounded number of lines per event.

Whatever a stranger can cause over and over (a hang-up, a rejected request, a connection
replaced at the cap) is logged through a :class:`Throttle`: at most ``LOG_LINES_PER_MINUTE``
lines of one kind of event per minute; the lines held back are counted, and the count goes out as
``suppressed`` with the event's next line. The metrics count every occurrence.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kernelpolicy.limits import LOG_LINES_PER_MINUTE

Emit = Callable[..., None]
"""``emit(level, event, **fields)``: the daemon's logger."""

WINDOW_SECONDS = 60.0


KINDS = ("method", "code", "reason")
"""Fields that make lines of one event different kinds, each throttled on its own: their values
come from closed sets (registered RPC methods, status codes, close reasons), never from a
client, so the table of windows stays small."""


class Throttle:
    """An ``Emit`` that passes at most ``per_window`` lines of each kind of event per window.

    Args:
        emit: Where the lines that pass go.
        per_window: Lines of one kind per window (``LOG_LINES_PER_MINUTE``).
        clock: Monotonic seconds (a fake one in tests).
    """

    def __init__(
        self,
        emit: Emit,
        per_window: int = LOG_LINES_PER_MINUTE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._emit = emit
        self._per_window = per_window
        self._clock = clock
        self._windows: dict[tuple[Any, ...], list[float]] = {}  # [start, lines, suppressed]

    def __call__(self, level: str, event: str, **fields: Any) -> None:
        now = self._clock()
        kind = (event, *(fields.get(name) for name in KINDS))
        window = self._windows.get(kind)
        if window is None or now - window[0] >= WINDOW_SECONDS:
            held = window[2] if window is not None else 0
            window = self._windows[kind] = [now, 0, held]
        if window[1] >= self._per_window:
            window[2] += 1
            return
        window[1] += 1
        if window[2]:
            fields["suppressed"] = int(window[2])
            window[2] = 0
        self._emit(level, event, **fields)
