"""Every background build ends (kernelpolicy/kernels/builds.py): one that dies with a
BaseException (SystemExit in its thread, KeyboardInterrupt on the cache-hit load in the caller)
or outlasts MAX_BUILD_SECONDS is failed, its calls told BuildFailed (the fallback, for the
process), never "compiling" for ever. Builds block on Events; the deadline reads a fake clock."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from kernelpolicy.kernels.builds import BuildFailed, Builds, BuildStats, Compiling
from kernelpolicy.limits import MAX_BUILD_SECONDS


class Threads:
    """Runs each build in a thread the test can join, and keeps what ended each thread."""

    def __init__(self) -> None:
        self.started: list[threading.Thread] = []
        self.ended_by: list[BaseException] = []

    def __call__(self, run: Callable[[], None], name: str) -> None:
        def target() -> None:
            try:
                run()
            except BaseException as exc:  # what the build's thread re-raised
                self.ended_by.append(exc)

        thread = threading.Thread(target=target, name=name, daemon=True)
        self.started.append(thread)
        thread.start()

    def join(self) -> None:
        for thread in self.started:
            thread.join(60)
            assert not thread.is_alive()


def dies_with(
    error: BaseException, release: threading.Event | None = None
) -> Callable[[str], None]:
    def build(key: str) -> None:
        assert release is None or release.wait(60)
        raise error

    return build


@pytest.mark.parametrize(
    ("error", "why"),
    [
        pytest.param(SystemExit(1), "SystemExit: 1", id="system-exit"),
        pytest.param(KeyboardInterrupt(), "KeyboardInterrupt: ", id="keyboard-interrupt"),
        pytest.param(GeneratorExit("closed"), "GeneratorExit: closed", id="generator-exit"),
        pytest.param(RuntimeError("planted"), "RuntimeError: planted", id="exception"),
    ],
)
def test_a_build_thread_that_dies_fails_its_variant(error: BaseException, why: str) -> None:
    """The thread ends (re-raising what is not an Exception): the variant is failed, the
    waiters are told, calls get BuildFailed."""
    threads, release = Threads(), threading.Event()
    builds: Builds[str] = Builds("dies", dies_with(error, release), start=threads)
    heard: list[str | None] = []
    with pytest.raises(Compiling) as compiling:
        builds.require("v")
    compiling.value.when_built(heard.append)
    release.set()
    threads.join()
    assert threads.ended_by == ([] if isinstance(error, Exception) else [error])
    assert builds.wait("v", timeout=0)
    with pytest.raises(BuildFailed, match=f"dies: v failed to build: {why}"):
        builds.require("v")
    assert heard == [why]
    assert builds.stats() == BuildStats(0, 0, 1, 1)


class HasAll:
    def has(self, key: str) -> bool:
        return True

    def add(self, key: str) -> None:
        raise AssertionError("a failed load is not recorded")


def test_an_interrupted_cache_load_fails_its_variant_and_reraises() -> None:
    """The cache-hit load runs in the caller: the interrupt reaches it, the variant fails."""
    builds: Builds[str] = Builds("load", dies_with(KeyboardInterrupt()), cache=HasAll())
    with pytest.raises(KeyboardInterrupt):
        builds.require("v")
    with pytest.raises(BuildFailed, match="load: v failed to build: KeyboardInterrupt"):
        builds.require("v")
    assert builds.stats() == BuildStats(0, 0, 1, 0)


@pytest.mark.parametrize(
    ("elapsed", "ends"),
    [
        pytest.param(MAX_BUILD_SECONDS, Compiling, id="at-the-deadline"),
        pytest.param(MAX_BUILD_SECONDS + 1, BuildFailed, id="past-the-deadline"),
    ],
)
def test_a_build_past_its_deadline_fails_and_is_not_used_later(
    elapsed: float, ends: type[Exception]
) -> None:
    """A hung build: past MAX_BUILD_SECONDS the call is told BuildFailed (and the waiters);
    the build that ends after that changes nothing."""
    now = [100.0]
    release = threading.Event()
    threads = Threads()

    def hangs(key: str) -> None:
        assert release.wait(60)

    builds: Builds[str] = Builds("hangs", hangs, start=threads, clock=lambda: now[0])
    heard: list[str | None] = []
    with pytest.raises(Compiling) as compiling:
        builds.require("v")
    compiling.value.when_built(heard.append)
    now[0] += elapsed
    with pytest.raises(ends):
        builds.require("v")
    if ends is BuildFailed:
        assert heard == [f"did not build within {MAX_BUILD_SECONDS:g} s (MAX_BUILD_SECONDS)"]
        assert builds.wait("v", timeout=0)
    release.set()
    threads.join()
    built = ends is Compiling
    assert builds.stats() == BuildStats(int(built), 0, int(not built), 2 if built else 1)
    if built:
        builds.require("v")
    else:
        with pytest.raises(BuildFailed, match="did not build within"):
            builds.require("v")
