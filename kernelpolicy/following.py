"""A Resolution kept current in a process that lives on: resolved again when the node's halts
or the policy files change, so that a kernel an operator switched off (a ``[[disable]]`` file
beside the policies) or the node's daemon halted leaves a running engine's per-call choices
(the vLLM plugin's processes) without a restart.

A Resolution never changes under its caller: a change is a new one, which
:attr:`Following.current` gives from then on (one attribute read; a call in flight finishes on
the one it took). A background thread looks every ``FOLLOW_SECONDS`` at what the stamp
function returns (for the plugin: one listing and a ``stat`` per policy file, one ``lstat`` of
the halts file) and resolves again only when it changed; a set that cannot be loaded keeps the
current Resolution and is said once.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from kernelpolicy.engine.resolution import Resolution

__all__ = ["FOLLOW_SECONDS", "Following"]

FOLLOW_SECONDS = 1.0
"""How often the thread looks for a change (a change is applied within about this long)."""


class Following:
    """The current Resolution of a long-lived process.

    Args:
        resolve: Resolves the process's inputs as they are now (may raise).
        stamp: What changes when those inputs change (compared with ``==``; never raises).
        changed: Called with (old, new) after a change, in the thread that found it.
        prepare: Called with a new Resolution before it becomes current (load what its calls
            run first, so that no call pays it).
        failed: Called with the message when a change could not be resolved (once per message).

    Attributes:
        current: The Resolution to use now.
        changes: Changes applied since the start.
    """

    def __init__(
        self,
        resolve: Callable[[], Resolution],
        stamp: Callable[[], object],
        *,
        changed: Callable[[Resolution, Resolution], None],
        failed: Callable[[str], None],
        prepare: Callable[[Resolution], None] = lambda resolution: None,
    ) -> None:
        self._resolve = resolve
        self._prepare = prepare
        self._stamp_of = stamp
        self._changed = changed
        self._failed = failed
        self._stamp = stamp()  # before resolving: a change meanwhile is seen by the next look
        self.current: Resolution = resolve()
        self.changes = 0
        self._failure: str | None = None
        self._lock = threading.Lock()  # one refresh at a time (the thread, or a caller)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._interval = FOLLOW_SECONDS

    def refresh(self) -> bool:
        """Resolve again if the inputs changed; whether the decisions changed."""
        with self._lock:
            stamp = self._stamp_of()
            if stamp == self._stamp:
                return False
            self._stamp = stamp
            try:
                new = self._resolve()
            except Exception as exc:  # a bad edit: the current decisions stay, said once
                message = str(exc) or type(exc).__name__
                if message != self._failure:
                    self._failure = message
                    self._failed(message)
                return False
            self._failure = None
            if new.fingerprint == self.current.fingerprint:
                return False
            self._prepare(new)
            old, self.current = self.current, new
            self.changes += 1
        self._changed(old, new)
        return True

    def start(self, interval: float = FOLLOW_SECONDS) -> None:
        """Look in a background thread every ``interval`` seconds (a forked child starts its
        own: threads do not survive a fork)."""
        self._interval = interval
        self._launch()
        os.register_at_fork(after_in_child=self._launch)

    def stop(self) -> None:
        self._stop.set()

    def _launch(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()  # a fork may have copied it held
        self._thread = threading.Thread(target=self._run, name="kernelpolicy-follow", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        stop = self._stop
        while not stop.wait(self._interval):
            try:
                self.refresh()
            except Exception as exc:  # a follower never takes its process down
                self._failed(f"{type(exc).__name__}: {exc}")


def changed_features(old: Resolution, new: Resolution) -> dict[str, tuple[Any, Any]]:
    """Feature -> (implementation before, after), for the features whose choice changed."""
    names = dict.fromkeys([*old.decisions, *new.decisions])
    pairs = {
        name: (
            getattr(old.decisions.get(name), "impl", None),
            getattr(new.decisions.get(name), "impl", None),
        )
        for name in names
    }
    return {name: pair for name, pair in pairs.items() if pair[0] != pair[1]}
