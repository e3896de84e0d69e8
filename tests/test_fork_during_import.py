"""A fork while impl()'s prefetch imports (vLLM forks its engine core after its plugin
resolved) leaves a child that works (kernelpolicy/engine/loading.py, gcpause.py): the import in
flight on the parent's thread, which the child has not, is dropped there with its locks and its
collector pause, so the child's first call imports on its own and its collector is on. The
planted import blocks on an Event (tests/planted_import.py); the child reports through a pipe,
under an alarm that only keeps a regression from hanging the run."""

from __future__ import annotations

import gc
import importlib
import json
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.engine.loading import LazyEntry
from tests.planted_import import IMPORT_BEGAN, IMPORT_RELEASE, planted_import

MODULE = "kp_fork_import"
KERNEL = "def kernel(x):\n    return x + 1\n"
"""The planted module's kernel, defined once its import is released."""

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    was = gc.isenabled()
    try:
        with planted_import(tmp_path, monkeypatch, MODULE, KERNEL):
            yield
    finally:
        (gc.enable if was else gc.disable)()


def in_child(work: Callable[[], Any]) -> dict[str, Any]:
    """Fork; the child runs ``work`` under an alarm and sends back what it returned (or the
    error) and whether its collector is on."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        code = 0
        try:
            signal.alarm(30)
            report: dict[str, Any] = {"gc_on_at_start": gc.isenabled()}
            IMPORT_RELEASE.set()  # the child's own import of the module may end
            try:
                report["answer"] = work()
            except Exception as exc:
                report["error"] = f"{type(exc).__name__}: {exc}"
            report["gc_on"] = gc.isenabled()
            os.write(write, json.dumps(report).encode())
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"the child hung or died: {status}"
    return dict(json.loads(text))


def _entry() -> LazyEntry:
    return LazyEntry(f"{MODULE}:kernel", None, (MODULE,), lambda function: None)


@pytest.mark.parametrize(
    ("nonblocking", "call"),
    [
        pytest.param(False, lambda entry: entry(1), id="blocking-entry-called"),
        pytest.param(True, lambda entry: entry(1), id="nonblocking-entry-called"),
        pytest.param(False, lambda entry: _entry()(1), id="another-entry-called"),
        pytest.param(
            False, lambda entry: importlib.import_module(MODULE).kernel(1), id="module-imported"
        ),
    ],
)
def test_a_child_forked_during_the_prefetch_imports_on_its_own(
    planted: None, nonblocking: bool, call: Callable[[LazyEntry], Any]
) -> None:
    """The parent's prefetch is mid-import (its lock, the module's import lock and a collector
    pause held): the child's call imports the module itself and answers, collector on."""
    gc.enable()
    entry = LazyEntry(f"{MODULE}:kernel", None, (MODULE,), lambda f: None, nonblocking=nonblocking)
    entry.prefetch()
    assert IMPORT_BEGAN.wait(60)
    assert not gc.isenabled()  # the prefetch holds the collector off in the parent
    report = in_child(lambda: call(entry))
    assert report == {"gc_on_at_start": True, "answer": 2, "gc_on": True}
    IMPORT_RELEASE.set()
    assert entry.load()(1) == 2  # the parent's import ends as before


def test_a_child_keeps_the_collector_off_where_the_parent_had_it_off(planted: None) -> None:
    """The parent ran with the collector off before the pause: so does the child."""
    gc.disable()
    entry = _entry()
    entry.prefetch()
    assert IMPORT_BEGAN.wait(60)
    report = in_child(lambda: entry(1))
    assert report == {"gc_on_at_start": False, "answer": 2, "gc_on": False}


def test_a_pause_of_the_forking_thread_goes_on_in_the_child() -> None:
    """Forked inside the thread's own pause: the child's collector is off until it leaves."""
    from kernelpolicy.gcpause import collector_paused

    was = gc.isenabled()
    gc.enable()
    try:

        def leave() -> list[bool]:
            inside = gc.isenabled()
            pause.__exit__(None, None, None)
            return [inside, gc.isenabled()]

        pause = collector_paused()
        pause.__enter__()
        try:
            report = in_child(leave)
        finally:
            pause.__exit__(None, None, None)
        assert report == {"gc_on_at_start": False, "answer": [False, True], "gc_on": True}
        assert gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()
