"""Two run-time changes to one decision never lose each other (review S5): the build thread's
note ("built") and a call thread's switch or refusal each read, replace and write
``decisions[feature]`` (kernelpolicy/engine/fallbacks.py). One change is held in the middle
of its update (its first ``dataclasses.replace``, between the read and the write) while the
other runs until it ends or waits for the lock; then the held one goes on. Events only: no
sleeps, no timings."""

from __future__ import annotations

import dataclasses
import threading
import types
from collections.abc import Callable
from typing import Any

import pytest

from kernelpolicy.engine import Resolution, fallbacks, resolve_policies
from kernelpolicy.kernels.builds import Compiling, Done
from kernelpolicy.policy import load_policy_text
from tests.helpers import fixture

FEATURE = "sampler.top_k_top_p"
POLICY = f"""
schema = "kernelpolicy.policy/v1"
[features."{FEATURE}"]
description = "a, then b, then torch, routed by batch"
fallback = "torch"
[[features."{FEATURE}".candidates]]
impl = "a"
entry = "{__name__}:kernel"
[[features."{FEATURE}".candidates]]
impl = "b"
entry = "{__name__}:kernel"
[[features."{FEATURE}".candidates]]
impl = "torch"
[[features."{FEATURE}".by_batch]]
min = 1
prefer = ["a", "b"]
"""
WAIT = 30.0
"""Seconds before a test that would hang fails instead (a deadlock, never a threshold)."""


def kernel(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("never called: the tests change the decision directly")


class WatchedLock:
    """A lock that says when a thread finds it held (it waits for it)."""

    def __init__(self, waiting: threading.Event) -> None:
        self._lock = threading.Lock()
        self._waiting = waiting

    def __enter__(self) -> None:
        if not self._lock.acquire(blocking=False):
            self._waiting.set()
            self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


class HeldReplace:
    """``dataclasses`` for fallbacks.py whose ``replace`` holds the named thread, the first
    time, until ``go`` is set."""

    def __init__(self, thread: str) -> None:
        self.thread = thread
        self.held = threading.Event()
        self.go = threading.Event()

    def replace(self, obj: Any, /, **changes: Any) -> Any:
        if threading.current_thread().name == self.thread and not self.held.is_set():
            self.held.set()
            assert self.go.wait(WAIT)
        return dataclasses.replace(obj, **changes)


def compiling_then_built(resolution: Resolution) -> Callable[[], None]:
    """A call of a served elsewhere while its variant compiles; returns what the build's
    thread calls when the variant is built."""
    told: list[Done] = []
    compiling = Compiling("fake-a", "float32 top-k", told.append)
    resolution.fallbacks.served_elsewhere(FEATURE, "a", compiling)
    return lambda: told[0](None)


def run_held(
    monkeypatch: pytest.MonkeyPatch,
    resolution: Resolution,
    first: Callable[[], None],
    second: Callable[[], None],
) -> None:
    """Run ``first`` in a thread held in its update, ``second`` in another until it ends or
    waits for the lock, then let ``first`` go on; both end."""
    hold = HeldReplace("first")
    monkeypatch.setattr(fallbacks, "dataclasses", types.SimpleNamespace(replace=hold.replace))
    ended_or_waiting = threading.Event()
    monkeypatch.setattr(resolution.fallbacks, "_lock", WatchedLock(ended_or_waiting))

    def then_say() -> None:
        second()
        ended_or_waiting.set()

    threads = [threading.Thread(target=first, name="first")]
    threads[0].start()
    assert hold.held.wait(WAIT)
    threads.append(threading.Thread(target=then_say, name="second"))
    threads[1].start()
    assert ended_or_waiting.wait(WAIT)
    hold.go.set()
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive()


BUILT = "compiling: a built float32 top-k; its calls switch to it"


def switched(resolution: Resolution) -> None:
    decision = resolution.decision(FEATURE)
    assert decision.impl == "torch"
    assert decision.order == ("torch",)
    assert resolution.select(FEATURE, batch=4) == "torch"
    assert "a failed at run time (planted)" in resolution.runtime_fallbacks[FEATURE]


def b_refused(resolution: Resolution) -> None:
    decision = resolution.decision(FEATURE)
    assert decision.impl == "a"
    assert decision.order == ("a", "torch")
    assert decision.order_for(4, "float32") == ("a", "torch")
    assert "b cannot be loaded (planted)" in resolution.runtime_fallbacks[FEATURE]


CHANGES: dict[str, tuple[Callable[[Resolution], None], Callable[[Resolution], None]]] = {
    "switch": (lambda r: r.fallbacks.switch(FEATURE, "planted"), switched),
    "refuse-b": (lambda r: r.fallbacks.refuse_impl(FEATURE, "b", "planted"), b_refused),
}


@pytest.mark.parametrize(
    ("change", "held"),
    [
        pytest.param("switch", "built", id="built-note-held-while-a-switch-runs"),
        pytest.param("switch", "change", id="switch-held-while-the-built-note-runs"),
        pytest.param("refuse-b", "built", id="built-note-held-while-a-refusal-runs"),
        pytest.param("refuse-b", "change", id="refusal-held-while-the-built-note-runs"),
    ],
)
def test_a_note_and_a_change_both_stay(
    monkeypatch: pytest.MonkeyPatch, change: str, held: str
) -> None:
    """Whichever is held in its update, the decision ends with both: the call thread's
    change (and select() answers from it) and the build thread's 'built' reason."""
    resolution = resolve_policies(fixture("cpu"), {}, load_policy_text(POLICY))
    built = compiling_then_built(resolution)
    make, check = CHANGES[change]
    changed: Callable[[], None] = lambda: make(resolution)  # noqa: E731 (a thread's target)
    first, second = (built, changed) if held == "built" else (changed, built)
    run_held(monkeypatch, resolution, first, second)
    check(resolution)
    assert BUILT in resolution.decision(FEATURE).reasons
    assert "a built float32 top-k" in resolution.runtime_fallbacks[FEATURE]
