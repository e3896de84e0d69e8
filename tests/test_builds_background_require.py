"""No call waits on a compiler (kernelpolicy/kernels/builds.py), the Builds object alone:
require() starts one build in a background thread and raises Compiling until it ends, a failed
build raises BuildFailed for good, warm() builds in the caller's thread, and a variant the
kernel cache holds is loaded in the calling thread (one it lacks is recorded once built). The
builds are fakes that block on an Event the test sets: no sleeps, no timings."""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest
import torch

# As in every file of this run that imports Triton: set before Triton is first imported, or a
# later file's kernels are not interpreted.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

from kernelpolicy.kernels.builds import BuildFailed, Builds, BuildStats, Compiling
from tests.build_helpers import SlowBuild


@pytest.mark.parametrize(
    ("fails", "after", "stats"),
    [
        pytest.param(False, None, BuildStats(1, 0, 0, 2), id="built"),
        pytest.param(True, BuildFailed, BuildStats(0, 0, 1, 2), id="failed-for-good"),
    ],
)
def test_require_starts_one_build_and_raises_until_it_ends(
    fails: bool, after: type[Exception] | None, stats: BuildStats
) -> None:
    """Two calls while building: one build started, both told Compiling; once it ends, a built
    variant returns at once and a failed one raises BuildFailed every time."""
    build = SlowBuild(fails)
    builds: Builds[str] = Builds("demo", build)
    for _ in range(2):
        with pytest.raises(Compiling, match="demo: v is compiling"):
            builds.require("v")
    heard: list[str | None] = []
    try:
        builds.require("v")
    except Compiling as compiling:
        compiling.when_built(heard.append)
    build.release.set()
    assert builds.wait("v", timeout=60)
    assert build.started == ["v"]
    for _ in range(2):
        if after is None:
            builds.require("v")
        else:
            with pytest.raises(after, match="failed to build: RuntimeError"):
                builds.require("v")
    assert heard == [None] if not fails else heard[0] is not None and "planted" in heard[0]
    assert builds.stats() == BuildStats(stats.built, 0, stats.failed, 3)


def test_warm_builds_now_and_reports_failures() -> None:
    """warm() builds each variant in the caller's thread; a failure is returned and stays."""

    def build(key: str) -> None:
        if key == "bad":
            raise ValueError("planted")

    builds: Builds[str] = Builds("warm-demo", build)
    assert builds.warm(["a", "bad", "a"]) == {"bad": "ValueError: planted"}
    builds.require("a")
    with pytest.raises(BuildFailed):
        builds.require("bad")


class FakeCache:
    """A kernel cache that holds ``held`` and records what is added."""

    def __init__(self, *held: str) -> None:
        self.held = set(held)
        self.added: list[str] = []

    def has(self, key: str) -> bool:
        return key in self.held

    def add(self, key: str) -> None:
        self.added.append(key)


class ThreadOf:
    """A build that records which thread ran it (and fails for ``bad``)."""

    def __init__(self) -> None:
        self.threads: dict[str, str] = {}

    def __call__(self, key: str) -> None:
        self.threads[key] = threading.current_thread().name
        if key == "bad":
            raise RuntimeError("planted")


@pytest.mark.parametrize(
    ("key", "held", "raises", "thread", "stats", "added"),
    [
        pytest.param("v", {"v"}, None, "MainThread", BuildStats(1, 0, 0, 0, 1), [], id="hit"),
        pytest.param(
            "v",
            set(),
            Compiling,
            "kernelpolicy build: c",
            BuildStats(1, 0, 0, 1),
            ["v"],
            id="miss-background-then-recorded",
        ),
        pytest.param(
            "bad",
            {"bad"},
            BuildFailed,
            "MainThread",
            BuildStats(0, 0, 1, 0),
            [],
            id="hit-that-fails",
        ),
    ],
)
def test_a_cached_variant_is_loaded_in_the_calling_thread(
    key: str,
    held: set[str],
    raises: type[Exception] | None,
    thread: str,
    stats: BuildStats,
    added: list[str],
) -> None:
    """A variant the cache holds is built by require() itself and returned (no Compiling: no
    call goes to a fallback); one it lacks builds in a thread and is recorded once built."""
    build, cache = ThreadOf(), FakeCache(*held)
    later: list[tuple[Any, str]] = []  # the background builds, started once require() is done
    builds: Builds[str] = Builds(
        "c", build, cache=cache, start=lambda run, name: later.append((run, name))
    )
    if raises is None:
        builds.require(key)
    else:
        with pytest.raises(raises):
            builds.require(key)
    for run, name in later:
        threading.Thread(target=run, name=name).start()
    assert builds.wait(key, timeout=60)
    assert build.threads == {key: thread}
    assert builds.stats() == stats
    assert cache.added == added


def test_what_a_process_builds_is_recorded_once() -> None:
    """warm() and a direct call's mark_built() record their variant; a second mark is free."""
    cache = FakeCache()
    builds: Builds[str] = Builds("rec", ThreadOf(), cache=cache)
    builds.warm(["a"])
    builds.mark_built("b")
    builds.mark_built("b")
    assert cache.added == ["a", "b"]
