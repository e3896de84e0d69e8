"""Python's cyclic garbage collector held off while kernelpolicy builds its start-up state.

An inference worker has imported torch (and initialised CUDA) before it resolves: hundreds of
thousands of objects that the collector's full pass walks. The modules and values a first
``resolve()`` creates are enough to trigger that pass, which then costs more than the whole
resolve (84 ms of 133 ms on the 2-core CPU machine with torch imported; see
``benchmarks/README.md``). kernelpolicy creates no garbage cycles worth collecting there, so it
holds the collector off for those calls: the pass runs at the worker's next collection instead,
over the same heap (the work is moved, not removed), outside the call being measured. The
holders are ``resolve()`` (with the pack's validation on a cache miss), the package's lazy
imports, an accelerated implementation's import (on ``impl()``'s background thread too, about
0.1-0.5 s on the H100, while the worker goes on), a cached kernel variant's load, and every
policy load (a 10,000-feature file: 2.9 s -> 1.6 s of CPU without the collector's passes).

A process forked while another thread holds the collector off (vLLM forks its engine core while
``impl()``'s prefetch imports) has the collector on again in the child, as the parent had it
before: that thread does not exist there to turn it on.
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]


class _Pause:
    """Who holds the collector off: the one owner of that state in the process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holders: dict[int, int] = {}  # thread ident -> depth inside collector_paused()
        self.turned_off = False  # whether collector_paused() turned it off (must turn it on)

    def enter(self) -> None:
        me = threading.get_ident()
        with self.lock:
            if not self.holders:
                self.turned_off = gc.isenabled()
                if self.turned_off:
                    gc.disable()
            self.holders[me] = self.holders.get(me, 0) + 1

    def leave(self) -> None:
        me = threading.get_ident()
        with self.lock:
            depth = self.holders.pop(me) - 1
            if depth:
                self.holders[me] = depth
            if not self.holders and self.turned_off:
                self.turned_off = False
                gc.enable()

    def after_fork_in_child(self) -> None:
        """The child of a fork has only the thread that forked: the pauses of the others (an
        import on ``impl()``'s prefetch thread) never end there, so they are dropped, and the
        collector is on again where the parent had it on before the first pause."""
        self.lock = threading.Lock()  # another thread may have held it at the fork
        me = threading.get_ident()
        self.holders = {me: self.holders[me]} if me in self.holders else {}
        if not self.holders and self.turned_off:
            self.turned_off = False
            gc.enable()


_PAUSE = _Pause()
if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_PAUSE.after_fork_in_child)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the body with the cyclic collector off, as it was found afterwards.

    Nests and is shared between threads: the collector comes back on when the last holder
    leaves, and only if it was on when the first one came (a process that runs with the
    collector off keeps it off).
    """
    _PAUSE.enter()
    try:
        yield
    finally:
        _PAUSE.leave()
