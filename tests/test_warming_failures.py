"""A warm run reports every task, whatever one build does (review: a build process's non-UTF-8
output, or an OSError starting it, escaped ``build_in_process``; ``Warming.run`` then raised,
``/readyz`` said ready with no failure and ``kernelpolicy warm`` lost the other tasks' report).
The build processes here are stand-in scripts given as ``sys.executable``."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy import warming

TASK = {"feature": "sampler.top_k_top_p", "impl": "triton", "dtype": "bfloat16", "vocab": 32000}
LATIN_1 = b"ptxas fatal: /data/mod\xe8le/kernel.ptx: error"  # a path in Latin-1, not UTF-8


def _script(tmp_path: Path, body: bytes) -> str:
    script = tmp_path / "python"
    script.write_bytes(b"#!/bin/sh\n" + body + b"\n")
    script.chmod(0o755)
    return str(script)


@pytest.mark.parametrize(
    ("body", "failed"),
    [
        pytest.param(
            b"printf '" + LATIN_1 + b"\\n'; exit 1",
            "ptxas fatal: /data/mod\ufffdle/kernel.ptx: error",
            id="fails-saying-latin-1",
        ),
        pytest.param(
            b"printf '" + LATIN_1 + b"\\n' >&2; exit 2",
            "ptxas fatal: /data/mod\ufffdle/kernel.ptx: error",
            id="fails-saying-latin-1-on-stderr",
        ),
        pytest.param(b"printf '" + LATIN_1 + b"\\n'; exit 0", None, id="builds-saying-latin-1"),
        pytest.param(None, "its build process could not start: FileNotFoundError", id="no-exec"),
    ],
)
def test_a_build_process_ends_as_a_result_whatever_it_does(
    body: bytes | None, failed: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Output that is not UTF-8 is read with the bytes replaced; a process that cannot start
    fails its task with why, as one that exits non-zero does."""
    executable = str(tmp_path / "missing") if body is None else _script(tmp_path, body)
    monkeypatch.setattr(sys, "executable", executable)
    result = warming.build_in_process(TASK, "cuda:0", dict(os.environ))
    assert {k: result[k] for k in TASK} == TASK
    if failed is None:
        assert result["failed"] is None
    else:
        assert failed in result["failed"]


def _raises(exc: BaseException) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def build(task: dict[str, Any]) -> dict[str, Any]:
        if task["vocab"] == 1:
            raise exc
        return {**task, "seconds": 0.0, "failed": None}

    return build


@pytest.mark.parametrize(
    ("error", "said"),
    [
        pytest.param(
            UnicodeDecodeError("utf-8", b"\xe8", 0, 1, "invalid continuation byte"),
            "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xe8",
            id="codec-error",
        ),
        pytest.param(
            BlockingIOError(11, "Resource temporarily unavailable"),
            "BlockingIOError",
            id="fork-refused",
        ),
        pytest.param(RuntimeError("boom"), "RuntimeError: boom", id="any-exception"),
    ],
)
def test_a_build_that_raises_fails_its_task_and_the_run_goes_on(
    error: BaseException, said: str
) -> None:
    """The run returns every task's result; the one that raised is failed with the reason, so
    the report, ``failed()`` and ``/readyz``'s progress count it."""
    tasks = [{**TASK, "vocab": vocab} for vocab in (1, 2, 3)]
    told: list[dict[str, Any]] = []
    run = warming.Warming(tasks, _raises(error), jobs=2, told=told.append)
    results = run.run()
    assert [r["vocab"] for r in results] == [1, 2, 3]
    assert said in results[0]["failed"]
    assert [r["failed"] for r in results[1:]] == [None, None]
    assert run.finished.is_set()
    assert run.progress() == (3, 3)
    assert [r["vocab"] for r in run.failed()] == [1]
    assert sorted(r["vocab"] for r in told) == [1, 2, 3]
