"""What the background-build tests share (tests/test_builds_background_*.py): a build that
blocks on an Event the test sets (or fails when told to), so that no test sleeps or times."""

from __future__ import annotations

import threading
from typing import Any


class SlowBuild:
    """A build that blocks until the test releases it (or fails, when told to)."""

    def __init__(self, fails: bool = False) -> None:
        self.release = threading.Event()
        self.began = threading.Event()  # the background thread has entered the build
        self.fails = fails
        self.started: list[object] = []

    def __call__(self, *args: Any) -> None:
        self.started.append(args[-1])
        self.began.set()
        assert self.release.wait(timeout=60), "the test never released the build"
        if self.fails:
            raise RuntimeError("PassManager::run failed (planted)")
