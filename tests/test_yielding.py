"""A background step (impl()'s prefetch, a background build) runs with the interpreter's
switch interval lowered, so that a call served meanwhile does not wait 5 ms for the lock after
each torch operation; the interval is put back as it was found, and someone else's change is
kept."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kernelpolicy.engine.loading import LazyEntry
from kernelpolicy.kernels.build_process import run_build
from kernelpolicy.kernels.builds import Builds, Compiling
from kernelpolicy.yielding import BACKGROUND_SWITCH_INTERVAL_S, background_step, only_waiting

DEFAULT = 0.005


@pytest.fixture(autouse=True)
def interval() -> Iterator[None]:
    found = sys.getswitchinterval()
    sys.setswitchinterval(DEFAULT)
    try:
        yield
    finally:
        sys.setswitchinterval(found)


def _one() -> list[float]:
    with background_step():
        inside = sys.getswitchinterval()
    return [inside, sys.getswitchinterval()]


def _nested() -> list[float]:
    with background_step():
        with background_step():
            pass
        inner_left = sys.getswitchinterval()
    return [inner_left, sys.getswitchinterval()]


def _shorter_found() -> list[float]:
    sys.setswitchinterval(0.0001)
    with background_step():
        inside = sys.getswitchinterval()
    return [inside, sys.getswitchinterval()]


def _changed_meanwhile() -> list[float]:
    with background_step():
        sys.setswitchinterval(0.01)  # the worker sets its own
    return [sys.getswitchinterval()]


@contextmanager
def _another_threads_step() -> Iterator[None]:
    """Another thread inside a background step for the body."""
    entered, release = threading.Event(), threading.Event()

    def other() -> None:
        with background_step():
            entered.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    entered.wait(10)
    try:
        yield
    finally:
        release.set()
        thread.join(10)


def _two_threads() -> list[float]:
    """The interval goes back when the last of two overlapping steps ends, not the first."""
    with _another_threads_step():
        with background_step():
            pass
        after_first = sys.getswitchinterval()
    return [after_first, sys.getswitchinterval()]


def _waiting_in_a_step() -> list[float]:
    with background_step():
        with only_waiting():
            waiting = sys.getswitchinterval()
        after = sys.getswitchinterval()
    return [waiting, after, sys.getswitchinterval()]


def _waiting_outside_a_step() -> list[float]:
    with only_waiting():
        return [sys.getswitchinterval()]


def _waiting_while_another_thread_runs_python() -> list[float]:
    """Another thread's step keeps the interval lowered while this one waits."""
    with _another_threads_step(), background_step(), only_waiting():
        waiting = sys.getswitchinterval()
    return [waiting, sys.getswitchinterval()]


LOW = BACKGROUND_SWITCH_INTERVAL_S
CASES = [
    pytest.param(_one, [LOW, DEFAULT], id="lowered-inside-restored-after"),
    pytest.param(_nested, [LOW, DEFAULT], id="nested-restored-by-the-outer-only"),
    pytest.param(_shorter_found, [0.0001, 0.0001], id="a-shorter-interval-is-left"),
    pytest.param(_changed_meanwhile, [0.01], id="someone-elses-change-is-kept"),
    pytest.param(_two_threads, [LOW, DEFAULT], id="two-threads-restored-by-the-last"),
    pytest.param(_waiting_in_a_step, [DEFAULT, LOW, DEFAULT], id="a-wait-steps-out"),
    pytest.param(_waiting_outside_a_step, [DEFAULT], id="a-wait-outside-a-step"),
    pytest.param(
        _waiting_while_another_thread_runs_python, [LOW, DEFAULT], id="another-step-stays"
    ),
]


@pytest.mark.parametrize(("steps", "expected"), CASES)
def test_background_step(steps: Callable[[], list[float]], expected: list[float]) -> None:
    assert steps() == pytest.approx(expected)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")
def test_a_child_forked_during_another_threads_step_has_the_interval_back() -> None:
    with _another_threads_step():
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: only this thread exists
            os.write(write, repr(sys.getswitchinterval()).encode())
            os._exit(0)
        os.close(write)
        seen = float(os.read(read, 64))
        os.close(read)
        os.waitpid(pid, 0)
        parent = sys.getswitchinterval()
    assert (seen, parent) == pytest.approx((DEFAULT, LOW))


RECORDER = """\
import sys
AT_IMPORT = sys.getswitchinterval()
AT_PREFETCH = []
def kernel(x):
    return x
def prefetch():
    AT_PREFETCH.append(sys.getswitchinterval())
kernel.prefetch = prefetch
"""


def test_impls_prefetch_runs_with_the_interval_lowered(tmp_path: Path) -> None:
    (tmp_path / "kp_yield_rec.py").write_text(RECORDER)
    sys.path.insert(0, str(tmp_path))
    try:
        LazyEntry("kp_yield_rec:kernel", None, ("kp_yield_rec",), lambda f: None).prefetch()
        for thread in threading.enumerate():
            if thread.name.startswith("kernelpolicy-import"):
                thread.join(30)
        module = sys.modules["kp_yield_rec"]
        assert [module.AT_IMPORT, *module.AT_PREFETCH] == pytest.approx([LOW, LOW])
        assert sys.getswitchinterval() == pytest.approx(DEFAULT)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("kp_yield_rec", None)


def test_a_background_build_runs_with_the_interval_lowered() -> None:
    seen: list[float] = []
    builds: Builds[str] = Builds("probe", lambda key: seen.append(sys.getswitchinterval()))
    with contextlib.suppress(Compiling):  # unless the build thread ended first
        builds.require("variant")
    for thread in threading.enumerate():
        if thread.name.startswith("kernelpolicy build"):
            thread.join(30)
    assert seen == pytest.approx([LOW])
    assert sys.getswitchinterval() == pytest.approx(DEFAULT)


def test_a_build_process_is_waited_for_at_the_default_interval() -> None:
    """A background build waiting on its child (a compiler's minutes) does not hold the
    interval lowered: only the Python on background threads does."""
    seen: list[float] = []

    def sample() -> None:
        time.sleep(0.3)
        seen.append(sys.getswitchinterval())

    sampler = threading.Thread(target=sample)
    with background_step():
        sampler.start()
        ended = run_build([sys.executable, "-c", "import time; time.sleep(1)"], {}, 30)
        after = sys.getswitchinterval()
    sampler.join(10)
    assert (ended.code, seen, after) == (0, pytest.approx([DEFAULT]), pytest.approx(LOW))
