"""A module whose import blocks until the test releases it, planted on ``sys.path`` (for
tests/test_fork_during_import.py and tests/test_import_in_flight.py): its import sets
:data:`IMPORT_BEGAN`, then waits for :data:`IMPORT_RELEASE` (60 s at most, which only keeps a
regression from hanging the run), then defines what the test gave. No sleeps, no timings."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

IMPORT_BEGAN = threading.Event()
IMPORT_RELEASE = threading.Event()


def blocking_module(body: str) -> str:
    """The text of a module that blocks as the module docstring says, then runs ``body``."""
    return f"""\
import sys
gate = sys.modules[{__name__!r}]
gate.IMPORT_BEGAN.set()
assert gate.IMPORT_RELEASE.wait(60), "the test never released the import"
{body}"""


def join_imports() -> None:
    """Wait for kernelpolicy's import threads (each ends once the import is released)."""
    for thread in threading.enumerate():
        if thread.name.startswith("kernelpolicy-import"):
            thread.join(60)


@contextmanager
def planted_import(
    directory: Path, monkeypatch: pytest.MonkeyPatch, module: str, body: str
) -> Iterator[None]:
    """``module`` planted in ``directory`` (put first on ``sys.path``), its gate closed; on the
    way out the gate is opened, the imports in flight end and the module is forgotten."""
    (directory / f"{module}.py").write_text(blocking_module(body))
    monkeypatch.syspath_prepend(str(directory))
    IMPORT_BEGAN.clear()
    IMPORT_RELEASE.clear()
    try:
        yield
    finally:
        IMPORT_RELEASE.set()
        join_imports()
        sys.modules.pop(module, None)
