"""The threads background builds run in: each a daemon thread that an exiting process waits for
a while (:func:`start_thread`), at most :data:`~kernelpolicy.limits.MAX_RUNNING_BUILDS` at once
(:class:`Slots`, :data:`SLOTS`); split out of :mod:`kernelpolicy.kernels.builds`.

Pure Python: importing this module imports neither torch nor a kernel library.
"""

from __future__ import annotations

import atexit
import collections
import threading
import time
from collections.abc import Callable

from kernelpolicy.limits import MAX_RUNNING_BUILDS
from kernelpolicy.yielding import background_step

__all__ = ["EXIT_WAIT_SECONDS", "SLOTS", "Slots", "start_thread"]


EXIT_WAIT_SECONDS = 30.0
"""How long a process that exits waits for the builds in flight: torch or a compiler killed in
the middle of a call by the interpreter's shutdown aborts the process ("terminate called
without an active exception"), so an exit lets a short build finish; a longer one is cut."""

_RUNNING: set[threading.Thread] = set()
_RUNNING_LOCK = threading.Lock()
_EXIT_HOOK = threading.Event()  # set once _wait_at_exit is registered (once per process)


def start_thread(run: Callable[[], None], name: str) -> None:
    """Run ``run`` in a daemon thread (a build never keeps the process alive for long: at exit
    it is waited for up to :data:`EXIT_WAIT_SECONDS`), handing the interpreter back often while
    it runs (:func:`~kernelpolicy.yielding.background_step`: the calls served meanwhile, by
    torch, do not queue behind its imports)."""

    def tracked() -> None:
        try:
            with background_step():
                run()
        finally:
            with _RUNNING_LOCK:
                _RUNNING.discard(thread)

    thread = threading.Thread(target=tracked, name=name, daemon=True)
    with _RUNNING_LOCK:
        if not _EXIT_HOOK.is_set():
            atexit.register(_wait_at_exit)
            _EXIT_HOOK.set()
        _RUNNING.add(thread)
    thread.start()


def _wait_at_exit() -> None:
    deadline = time.monotonic() + EXIT_WAIT_SECONDS
    with _RUNNING_LOCK:
        running = list(_RUNNING)
    for thread in running:
        thread.join(max(0.0, deadline - time.monotonic()))


class Slots:
    """At most ``limit`` background builds run at once; the others wait, in the order they
    were asked for, and each starts as a running one ends (the slot passes to it).

    Thread-safe. A build holds its slot until its run ends: one that hangs in its thread
    holds it for good, and the variants waiting behind it fail at their deadline."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._running = 0
        self._waiting: collections.deque[Callable[[], None]] = collections.deque()

    def submit(self, begin: Callable[[], None]) -> None:
        """Call ``begin`` now where a slot is free, else when one frees; ``begin`` starts a
        build that calls :meth:`release` once, when it ends."""
        with self._lock:
            if self._running >= self.limit:
                self._waiting.append(begin)
                return
            self._running += 1
        begin()

    def release(self) -> None:
        """A build ended: its slot goes to the first waiting one, else is free."""
        with self._lock:
            if not self._waiting:
                self._running -= 1
                return
            begin = self._waiting.popleft()
        begin()

    def counts(self) -> tuple[int, int]:
        """(running, waiting)."""
        with self._lock:
            return self._running, len(self._waiting)


SLOTS = Slots(MAX_RUNNING_BUILDS)
"""The process's slots, shared by every kernel family's :class:`Builds`."""
