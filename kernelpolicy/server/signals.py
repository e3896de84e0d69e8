"""SIGHUP before the daemon's event loop runs: remembered, not fatal.

SIGHUP's default action ends the process. ``kernelpolicy serve`` spends its first fraction of a
second importing, probing and loading policies before the event loop can take the signal, so
the first thing it does (``python -m kernelpolicy serve`` before importing the CLI) is
:func:`hold_sighup`: a SIGHUP in that window is recorded, and the daemon reloads once it serves.
Importing this module imports nothing else.
"""

from __future__ import annotations

import signal
from types import FrameType

_state: dict[str, object] = {"pending": False, "installed": False, "previous": None}


def _remember(signum: int, frame: FrameType | None) -> None:
    _state["pending"] = True


def hold_sighup() -> None:
    """Record SIGHUP instead of dying, until the daemon's loop installs its own handler."""
    if not _state["installed"]:
        _state["previous"] = signal.signal(signal.SIGHUP, _remember)
        _state["installed"] = True


def release_sighup() -> None:
    """Put back the SIGHUP handler that was there before :func:`hold_sighup` (for callers
    that run ``serve`` inside a longer-lived process, such as tests)."""
    if _state["installed"]:
        previous = _state["previous"]
        signal.signal(signal.SIGHUP, previous if previous is not None else signal.SIG_DFL)  # type: ignore[arg-type]
        _state.update(installed=False, pending=False, previous=None)


def take_pending() -> bool:
    """Whether a SIGHUP arrived while held (and forget it)."""
    pending = bool(_state["pending"])
    _state["pending"] = False
    return pending
