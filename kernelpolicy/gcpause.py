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
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]


class _Pause:
    """Who holds the collector off: the one owner of that state in the process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holders = 0  # threads inside collector_paused()
        self.turned_off = False  # whether collector_paused() turned it off (must turn it on)

    def enter(self) -> None:
        with self.lock:
            if self.holders == 0:
                self.turned_off = gc.isenabled()
                if self.turned_off:
                    gc.disable()
            self.holders += 1

    def leave(self) -> None:
        with self.lock:
            self.holders -= 1
            if self.holders == 0 and self.turned_off:
                self.turned_off = False
                gc.enable()


_PAUSE = _Pause()


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
