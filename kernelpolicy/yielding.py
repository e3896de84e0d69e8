"""kernelpolicy's background threads hand the interpreter back often while they run, so that
a call served meanwhile does not queue behind them.

``impl()`` imports an accelerated implementation on a background thread (its prefetch:
Triton's modules, the hash of Triton's installation, each kernel's source hash), and a kernel
variant not built yet is built or loaded on one (FlashInfer's build imports FlashInfer there):
0.5-1 s of mostly Python at a worker's start on the lent H100. A call issued meanwhile is served
by the fallback (torch): about a hundred operations, and torch lets go of the interpreter's lock
in each one, so the call asks for it back about a hundred times while a background thread holds
it. CPython hands it over only after its switch interval (5 ms by default) each time. Every
thread :func:`~kernelpolicy.kernels.build_threads.start_thread` starts runs in a
:func:`background_step`, with the interval at :data:`BACKGROUND_SWITCH_INTERVAL_S`: with it set
for the whole process, the first sample came 0.40-0.42 s after ``impl()`` (the H100,
2026-11-27, ``benchmarks/README.md``) against 0.53-0.81 s at the default; 1 ms was not enough
(0.54-0.71). Calls cost a little more while background threads run (more hand-overs where two
threads both run Python), for at most as long as a build takes.

The interval is the process's: it is lowered when the first background step starts (only where
it is longer), and put back as it was found when the last one ends, unless someone else has
changed it meanwhile (theirs is kept). A process forked meanwhile has it back in the child.
A background step that only waits (a build in a child process, up to ``MAX_BUILD_SECONDS``) steps
out for the wait (:func:`only_waiting`): the interval is lowered while Python runs on a
background thread, not for as long as a compiler does.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["BACKGROUND_SWITCH_INTERVAL_S", "background_step", "only_waiting"]

BACKGROUND_SWITCH_INTERVAL_S = 0.0002
"""The interpreter's switch interval while a background step runs (CPython's default: 0.005)."""


class _Lowered:
    """Who holds the switch interval lowered: the one owner of that state in the process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0  # background steps running
        self.found: float | None = None  # the interval found by the first, where it lowered it
        self.set_to = 0.0  # what it set (read back), to see whether someone changed it since

    def enter(self) -> None:
        with self.lock:
            self.depth += 1
            if self.depth > 1:
                return
            found = sys.getswitchinterval()
            if found > BACKGROUND_SWITCH_INTERVAL_S:
                sys.setswitchinterval(BACKGROUND_SWITCH_INTERVAL_S)
                self.found, self.set_to = found, sys.getswitchinterval()

    def leave(self) -> None:
        with self.lock:
            self.depth -= 1
            if self.depth == 0:
                self._restore()

    def _restore(self) -> None:
        found, self.found = self.found, None
        if found is not None and sys.getswitchinterval() == self.set_to:
            sys.setswitchinterval(found)

    def after_fork_in_child(self) -> None:
        """The child of a fork has only the thread that forked: the steps of the others never
        end there, so the interval goes back now (a step of this thread restores it at its end
        as usual)."""
        self.lock = threading.Lock()  # another thread may have held it at the fork
        if self.depth and not _MINE.depth:
            self.depth = 0
            self._restore()
        else:
            self.depth = _MINE.depth


class _Mine(threading.local):
    depth = 0  # this thread's background steps running


_LOWERED = _Lowered()
_MINE = _Mine()
if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_LOWERED.after_fork_in_child)


@contextmanager
def background_step() -> Iterator[None]:
    """Run the body (a background thread's work) with the switch interval at most
    :data:`BACKGROUND_SWITCH_INTERVAL_S`; nests and is shared between threads."""
    _LOWERED.enter()
    _MINE.depth += 1
    try:
        yield
    finally:
        _MINE.depth -= 1
        _LOWERED.leave()


@contextmanager
def only_waiting() -> Iterator[None]:
    """Run the body (this thread waiting on something else: a child process) outside this
    thread's background steps, which take the interval lowered again when it ends; outside a
    background step, nothing changes."""
    depth = _MINE.depth
    for _ in range(depth):
        _LOWERED.leave()
    _MINE.depth = 0
    try:
        yield
    finally:
        for _ in range(depth):
            _LOWERED.enter()
        _MINE.depth = depth
