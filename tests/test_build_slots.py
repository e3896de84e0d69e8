"""At most MAX_RUNNING_BUILDS background builds run at once in a process (review S3,
kernelpolicy/kernels/build_threads.py ``Slots``): the others wait their turn, in the order their
first calls asked, and start as running ones end; a call of a waiting variant is told Compiling
(served elsewhere) like any call during a build. Builds block on Events the test sets; no
sleeps, no timings."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from kernelpolicy.kernels.build_threads import SLOTS, Slots
from kernelpolicy.kernels.builds import BuildFailed, Builds, BuildStats, Compiling
from kernelpolicy.limits import MAX_BUILD_SECONDS, MAX_RUNNING_BUILDS


class Blocking:
    """Builds that each block until the test releases their variant; notes who began."""

    def __init__(self) -> None:
        self.release: dict[str, threading.Event] = {}
        self.began: list[str] = []
        self.began_changed = threading.Condition()

    def __call__(self, key: str) -> None:
        event = self.release.setdefault(key, threading.Event())
        with self.began_changed:
            self.began.append(key)
            self.began_changed.notify_all()
        assert event.wait(60), "the test never released the build"

    def wait_began(self, count: int) -> list[str]:
        with self.began_changed:
            assert self.began_changed.wait_for(lambda: len(self.began) >= count, 60)
            return list(self.began)

    def let(self, key: str) -> None:
        self.release.setdefault(key, threading.Event()).set()


def test_the_process_limit_is_two_and_shared() -> None:
    """The process's slots: MAX_RUNNING_BUILDS (2), one pool that every family uses."""
    assert MAX_RUNNING_BUILDS == 2
    assert SLOTS.limit == MAX_RUNNING_BUILDS
    assert Builds("slots-default", lambda key: None)._slots is SLOTS


@pytest.mark.parametrize(
    ("limit", "asked", "order"),
    [
        pytest.param(2, ["a", "b", "c", "d"], [("a", "b"), ("c",), ("d",)], id="two-of-four"),
        pytest.param(1, ["a", "b", "c"], [("a",), ("b",), ("c",)], id="one-at-a-time"),
        pytest.param(3, ["a", "b"], [("a", "b")], id="under-the-limit"),
    ],
)
def test_builds_beyond_the_limit_wait_their_turn(
    limit: int, asked: list[str], order: list[tuple[str, ...]]
) -> None:
    """With every build blocking, only ``limit`` begin; each one released lets the next
    waiting one begin, in the order they were asked; every call meanwhile is told Compiling."""
    build, slots = Blocking(), Slots(limit)
    builds: Builds[str] = Builds("bounded", build, slots=slots)
    for key in asked:
        with pytest.raises(Compiling, match=f"bounded: {key} is compiling"):
            builds.require(key)
    began = list(order[0])
    assert build.wait_began(len(began)) == began
    assert slots.counts() == (min(limit, len(asked)), max(0, len(asked) - limit))
    for released, later in enumerate(order[1:]):
        for key in later:  # still waiting: served elsewhere, not started twice
            with pytest.raises(Compiling):
                builds.require(key)
        build.let(asked[released])  # the oldest running one ends: the next waiting begins
        began += later
        assert build.wait_began(len(began)) == began
    for key in asked:
        build.let(key)
    for key in asked:
        assert builds.wait(key, timeout=60)
    assert build.began == asked  # each built once, in order
    assert builds.stats() == BuildStats(len(asked), 0, 0, len(asked) + len(asked) - len(order[0]))
    assert slots.counts() == (0, 0)


def test_slots_are_shared_between_families() -> None:
    """Two families on one pool of one slot: the second family's build waits for the first's."""
    build, slots = Blocking(), Slots(1)
    first: Builds[str] = Builds("first", build, slots=slots)
    second: Builds[str] = Builds("second", build, slots=slots)
    for builds, key in ((first, "x"), (second, "y")):
        with pytest.raises(Compiling):
            builds.require(key)
    assert build.wait_began(1) == ["x"]
    assert slots.counts() == (1, 1)
    build.let("x")
    assert build.wait_began(2) == ["x", "y"]
    build.let("y")
    assert second.wait("y", timeout=60)
    assert slots.counts() == (0, 0)


def test_a_variant_past_its_deadline_while_waiting_is_failed_and_never_built() -> None:
    """The deadline counts from the first call, the wait included: a waiting variant past it is
    failed (BuildFailed), and when its turn comes it is skipped and the slot passes on."""
    now = [0.0]
    build, slots = Blocking(), Slots(1)
    builds: Builds[str] = Builds("late", build, slots=slots, clock=lambda: now[0])
    for key in ("a", "b", "c"):
        with pytest.raises(Compiling):
            builds.require(key)
    assert build.wait_began(1) == ["a"]
    now[0] = MAX_BUILD_SECONDS + 1
    with pytest.raises(BuildFailed, match="did not build within 900 s"):
        builds.require("b")
    now[0] = 0.0  # "c" is asked again before its own deadline: still waiting
    with pytest.raises(Compiling):
        builds.require("c")
    build.let("a")
    assert build.wait_began(2) == ["a", "c"]
    build.let("c")
    assert builds.wait("c", timeout=60)
    assert build.began == ["a", "c"]
    assert slots.counts() == (0, 0)


def test_a_build_that_cannot_start_fails_and_frees_its_slot() -> None:
    """A thread that cannot be started (the process's limit) fails its variant, not
    "compiling" for ever, and its slot goes to the next."""
    slots = Slots(1)

    def no_thread(run: Callable[[], None], name: str) -> None:
        raise RuntimeError("can't start new thread")

    builds: Builds[str] = Builds("nothread", lambda key: None, start=no_thread, slots=slots)
    with pytest.raises(BuildFailed, match="could not start: RuntimeError: can't start new"):
        builds.require("v")
    assert slots.counts() == (0, 0)
