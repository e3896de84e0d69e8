"""The first look for the kernel cache (an os.walk and an lstat of up to 100,000 entries) is
never made on a call's path (kernelpolicy/kernels/cache_lookup.py, builds.py): a call that
finds the cache not looked for yet is told Compiling (served by the next candidate) and the
variant's background build looks, then loads the variant from the cache or builds it; once
looked for, a cached variant loads in the calling thread as before. The walk is a fake that
blocks on an Event; a join's timeout only keeps a regression from hanging the run."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy import kernel_cache as kernel_cache_module
from kernelpolicy.kernel_cache import BuiltRecord, prepare_kernel_cache
from kernelpolicy.kernels.builds import Builds, BuildStats, Compiling
from kernelpolicy.kernels.cache_lookup import kernel_cache, looking_for_kernel_cache


class InKernelCache:
    """What the Triton sampler's CachedVariants does: ask the process's kernel cache."""

    def has(self, key: str) -> bool:
        record = kernel_cache()
        return record is not None and record.has(key)

    def add(self, key: str) -> None:
        record = kernel_cache()
        if record is not None:
            record.add(key)


class Walk:
    """cache_problem, the walk, blocked until the test releases it."""

    def __init__(self) -> None:
        self.began, self.release = threading.Event(), threading.Event()
        self.threads: list[str] = []

    def __call__(self, root: Path) -> str | None:
        self.threads.append(threading.current_thread().name)
        self.began.set()
        assert self.release.wait(60), "the test never released the walk"
        return None


@pytest.fixture
def walk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Walk]:
    root = prepare_kernel_cache(tmp_path)
    BuiltRecord(root).add("held")
    fake = Walk()
    monkeypatch.setattr(kernel_cache_module, "cache_problem", fake)
    # not looked for yet, as in a worker that exec gave the cache's TRITON_CACHE_DIR
    with looking_for_kernel_cache({"TRITON_CACHE_DIR": str(root / "triton")}):
        try:
            yield fake
        finally:  # a look blocked in the walk holds the lookup's lock: end it first
            fake.release.set()


def call(require: Callable[[], None]) -> tuple[threading.Event, list[Any]]:
    """``require()`` on a thread of its own: done once it returned or raised."""
    done, outcome = threading.Event(), list[Any]()

    def run() -> None:
        try:
            require()
            outcome.append("ran")
        except Compiling as exc:
            outcome.append(exc)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done, outcome


@pytest.mark.parametrize(
    ("key", "stats"),
    [
        pytest.param("held", BuildStats(1, 0, 0, 1, loaded=1), id="in-the-cache"),
        pytest.param("other", BuildStats(1, 0, 0, 1, loaded=0), id="not-in-the-cache"),
    ],
)
def test_the_first_call_does_not_walk_the_cache(walk: Walk, key: str, stats: BuildStats) -> None:
    """The call is told Compiling while the walk is blocked; the build's thread walked, then
    loaded (or built) the variant; the next variant in the cache loads in the caller."""
    built: list[str] = []
    threads: list[threading.Thread] = []

    def start(run: Callable[[], None], name: str) -> None:
        threads.append(threading.Thread(target=run, name=name, daemon=True))
        threads[-1].start()

    builds: Builds[str] = Builds("walk", built.append, cache=InKernelCache(), start=start)
    done, outcome = call(lambda: builds.require(key))
    assert done.wait(60), "the call waited on the walk"
    assert isinstance(outcome[0], Compiling)
    walk.release.set()
    threads[0].join(60)
    assert walk.threads == ["kernelpolicy build: walk"]
    assert builds.stats() == stats
    builds.require(key)  # built now
    record = kernel_cache()
    assert record is not None
    record.add("later")
    builds.require("later")  # looked for: a cached variant loads in this thread, no Compiling
    assert len(threads) == 1
    assert builds.stats().loaded == stats.loaded + 1


def test_the_samplers_prefetch_makes_the_look(walk: Walk) -> None:
    """impl()'s prefetch thread looks for the cache, so that a call soon after finds it looked
    for and loads a cached variant in its own thread (before, the first call of a warm-built
    variant went to the next candidate once, until its build's thread had looked)."""
    pytest.importorskip("triton")
    from kernelpolicy.kernels.sampling_triton import prefetch

    walk.release.set()
    prefetch()
    assert walk.threads == [threading.current_thread().name]  # the prefetch's own thread here
    record = kernel_cache()  # looked for already: no walk again
    assert record is not None
    assert record.has("held")
    assert len(walk.threads) == 1
