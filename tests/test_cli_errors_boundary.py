"""The CLI's error boundary is total: whatever a command raises becomes an exit code and at
most one line on stderr, and a reader that goes away first is no error."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from kernelpolicy.cli.common import run_guarded
from kernelpolicy.errors import KernelPolicyError
from tests.cli_error_helpers import CPU
from tests.helpers import ROOT


def _raise(exc: BaseException) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        raise exc

    return run


@pytest.mark.parametrize(
    ("exc", "code", "message"),
    [
        pytest.param(KernelPolicyError("bad input"), 2, "kernelpolicy: error: bad input",
                     id="kernelpolicy-error"),
        pytest.param(FileNotFoundError(2, "No such file or directory", "/x/y"), 2,
                     "kernelpolicy: error: FileNotFoundError (/x/y): No such file or directory",
                     id="os-error-with-file"),
        pytest.param(PermissionError(13, "Permission denied"), 2,
                     "kernelpolicy: error: PermissionError: Permission denied", id="os-error"),
        pytest.param(ValueError("x" * 5000), 2, "kernelpolicy: error: ValueError: xxx",
                     id="value-error-cut"),
        pytest.param(RecursionError("deep"), 2, "kernelpolicy: error: RecursionError: deep",
                     id="recursion-error"),
        pytest.param(RuntimeError("bug"), 2,
                     "kernelpolicy: error: internal error, please report it: RuntimeError: bug",
                     id="any-other-exception"),
    ],
)  # fmt: skip
def test_boundary_is_total(
    exc: BaseException, code: int, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Whatever a command raises becomes an exit code and at most one line on stderr."""
    assert run_guarded(argparse.Namespace(run=_raise(exc))) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(message)
    assert len(err) < 600


def test_closed_pipe_is_not_an_error() -> None:
    """`kernelpolicy explain --json | true` (the reader is gone first): no traceback."""
    script = (
        f"{sys.executable} -m kernelpolicy explain --platform {CPU} --json | true; "
        "echo ${PIPESTATUS[0]}"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KERNELPOLICY_LOG_FORMAT": "off"}
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=env, check=False
    )
    assert done.stdout.strip() == "0"
    assert "Traceback" not in done.stderr
    assert "BrokenPipe" not in done.stderr
