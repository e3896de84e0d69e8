"""The cyclic collector is held off while kernelpolicy builds its start-up state (a first
resolve(), an accelerated implementation's import) and comes back as it was found."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterator

import pytest

from kernelpolicy.api import resolve
from kernelpolicy.gcpause import collector_paused
from kernelpolicy.platform.fixtures import fixture_dir
from kernelpolicy.platform.model import load_platform
from kernelpolicy.policy import loader
from kernelpolicy.policy.loader import load_policy_text


@pytest.fixture
def collector_state() -> Iterator[None]:
    """Whatever a case does, the collector leaves the test as it came."""
    was = gc.isenabled()
    threshold = gc.get_threshold()
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        (gc.enable if was else gc.disable)()


def _plain() -> list[bool]:
    with collector_paused():
        inside = gc.isenabled()
    return [inside, gc.isenabled()]


def _nested() -> list[bool]:
    with collector_paused():
        with collector_paused():
            innermost = gc.isenabled()
        between = gc.isenabled()
    return [innermost, between, gc.isenabled()]


def _raised() -> list[bool]:
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("the body failed")
    return [gc.isenabled()]


def _two_threads() -> list[bool]:
    """A thread that enters while another holds the pause, and leaves after it."""
    entered, first_left = threading.Event(), threading.Event()
    seen: list[bool] = []

    def second() -> None:
        with collector_paused():
            entered.set()
            first_left.wait(10)
            seen.append(gc.isenabled())  # the first holder has left: still off

    with collector_paused():
        thread = threading.Thread(target=second)
        thread.start()
        entered.wait(10)
    first_left.set()
    thread.join(10)
    return [*seen, gc.isenabled()]


def _holder_outlives_a_policy_load() -> list[bool]:
    """A thread that starts holding the pause while policies load and stays after the load:
    the load pauses the collector through the same owner, so its end leaves it off for that
    holder (a pause of its own would turn it on there), and the last holder turns it on."""
    held, loaded = threading.Event(), threading.Event()
    seen: list[bool] = []
    threads: list[threading.Thread] = []

    def holder() -> None:
        with collector_paused():
            held.set()
            loaded.wait(10)
            seen.append(gc.isenabled())

    def validate_with_a_new_holder(*args: object) -> object:
        if not threads:  # while the load is inside its pause
            threads.append(threading.Thread(target=holder))
            threads[0].start()
            held.wait(10)
        return validate(*args)

    validate = loader._validate
    loader._validate = validate_with_a_new_holder  # restored below
    try:
        load_policy_text(SMALL_POLICY)
    finally:
        loader._validate = validate
    loaded.set()
    threads[0].join(10)
    return [*seen, gc.isenabled()]


SMALL_POLICY = """
schema = "kernelpolicy.policy/v1"

[features.demo]
description = "One feature, one candidate"
fallback = "torch"

[[features.demo.candidates]]
impl = "torch"
entry = "json:loads"
"""

CASES: dict[str, tuple[bool, Callable[[], list[bool]], list[bool]]] = {
    # name: (collector on before, what the case does, gc.isenabled() at each point it reports)
    "off inside, on after": (True, _plain, [False, True]),
    "a process that runs with it off keeps it off": (False, _plain, [False, False]),
    "nested: on only after the outermost": (True, _nested, [False, False, True]),
    "a failing body still turns it back on": (True, _raised, [True]),
    "two threads: on after the last leaves": (True, _two_threads, [False, True]),
    "a policy load shares the pause": (True, _holder_outlives_a_policy_load, [False, True]),
}


@pytest.mark.parametrize("name", CASES)
def test_collector_paused(name: str, collector_state: None) -> None:
    enabled, case, expected = CASES[name]
    (gc.enable if enabled else gc.disable)()
    assert case() == expected


def test_no_collection_runs_inside_a_resolve(
    collector_state: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the collector set to run on every allocation, none runs while resolve() gathers
    its inputs (a worker's full pass over torch's heap is not charged to it), and it is on
    again afterwards."""
    import kernelpolicy.api

    platform = load_platform(fixture_dir() / "platforms" / "h100-real.json")
    collections: list[int] = []
    during: list[list[int]] = []
    gather = kernelpolicy.api.gather

    def watched(*args: object, **kwargs: object) -> object:
        start = len(collections)
        inputs = gather(*args, **kwargs)  # type: ignore[arg-type]
        during.append(collections[start:])
        return inputs

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    monkeypatch.setattr(kernelpolicy.api, "gather", watched)
    for thread in threading.enumerate():  # an earlier test's background import holds a pause
        # (start_thread's threads: imports and builds; not the reporter or a follower, which
        # live as long as the process and hold none)
        if thread.name.startswith(("kernelpolicy-import", "kernelpolicy build")):
            thread.join(60)
    gc.enable()
    gc.callbacks.append(count)
    try:
        gc.set_threshold(1, 1, 1)
        resolution = resolve(platform=platform, env={})
        after = len(collections)
        gc.collect(0)  # the callback is wired: a collection is seen
        seen_after = len(collections) > after
    finally:
        gc.set_threshold(700, 10, 10)
        gc.callbacks.remove(count)
    assert resolution.decisions
    assert during == [[]]
    assert gc.isenabled()
    assert seen_after
