"""Ctrl-C in a CLI process: the first SIGINT ends it with one line and exit 130, and is never lost.

Python runs a signal's handler in the main thread at the next bytecode it executes, and that
bytecode may belong to a callback whose exceptions Python cannot raise (a weakref callback, such
as the import system's module-lock clean-up, or a ``__del__``): the KeyboardInterrupt is then
reported as "Exception ignored in ..." and dropped, while the process goes on. :class:`Interrupts`
notices that through :data:`sys.unraisablehook`, says nothing, and raises the interrupt again
in the main code a moment later (SIGALRM), so that one Ctrl-C always ends the process.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType
from typing import Any

REDELIVER_S = 0.001
"""Delay before an interrupt lost in a callback is raised again: the callback has returned."""


class Interrupts:
    """The SIGINT handler of a CLI process (``install``), and its owner of "already exiting"."""

    def __init__(self) -> None:
        self.exiting = False
        self._previous_hook = sys.unraisablehook

    def install(self, *, restore: bool) -> None:
        """Handle SIGINT here if Python's default handler has it, or SIG_IGN where ``restore``.

        Python keeps a SIG_IGN inherited from a parent (``cmd &`` in a script), and a daemon
        started so would never stop on Ctrl-C or ``kill -INT``; ``exec`` passes ``restore``
        False so that its engine inherits the parent's choice.
        """
        current = signal.getsignal(signal.SIGINT)
        if current is signal.default_int_handler or (restore and current is signal.SIG_IGN):
            signal.signal(signal.SIGINT, self.on_sigint)
            sys.unraisablehook = self.on_unraisable

    def on_sigint(self, signum: int, frame: FrameType | None) -> None:
        """The first SIGINT raises KeyboardInterrupt; any further one, while the process exits
        on it, is ignored (a second Ctrl-C must not become a traceback during clean-up)."""
        if self.exiting:
            return
        self.exiting = True
        raise KeyboardInterrupt

    def stop_listening(self) -> None:
        """The process exits on an interrupt its code caught: ignore SIGINT from now on."""
        self.exiting = True
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    def on_unraisable(self, unraisable: Any) -> None:
        """Our KeyboardInterrupt dropped by a callback: raised again in the main code, silently;
        anything else goes to the hook that was there before."""
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and self.exiting:
            signal.signal(signal.SIGALRM, self._redeliver)
            signal.setitimer(signal.ITIMER_REAL, REDELIVER_S)
            return
        self._previous_hook(unraisable)

    def _redeliver(self, signum: int, frame: FrameType | None) -> None:
        while frame is not None:  # still inside the hook: try again shortly (in another
            # callback, it is dropped again and comes back through the hook)
            if frame.f_code is Interrupts.on_unraisable.__code__:
                signal.setitimer(signal.ITIMER_REAL, REDELIVER_S)
                return
            frame = frame.f_back
        raise KeyboardInterrupt
