"""serve --port-file that cannot be written (review: a directory or /proc/nope was tried only
after binding, and the daemon ended in an IsADirectoryError line, an asyncio traceback and, on a
unix socket, the socket, report socket and halts file left behind)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import ROOT

CPU = str(ROOT / "kernelpolicy/fixtures/platforms/cpu.json")
FAILS_LATE = """
import errno, sys
import kernelpolicy.cli.serve_cmd as serve
from kernelpolicy.cli.port_file import port_file_error
def full(path, addresses):  # the disk fills between the check and the write
    raise port_file_error(path, OSError(errno.ENOSPC, "No space left on device"))
serve.write_port_file = full
from kernelpolicy.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _serve(
    port_file: str, *listen: str, code: str | None = None
) -> subprocess.CompletedProcess[str]:
    head = [sys.executable, "-c", code] if code else [sys.executable, "-m", "kernelpolicy"]
    argv = ["serve", "--no-watch", "--platform", CPU, "--port-file", port_file]
    env = {k: v for k, v in os.environ.items() if k.startswith(("PATH", "HOME", "PYTHON"))}
    return subprocess.run(
        [*head, *argv, *(arg for address in listen for arg in ("--listen", address))],
        capture_output=True, text=True, timeout=120, check=False, env=env, cwd=ROOT,
    )  # fmt: skip


def _a_directory(root: Path) -> str:
    (root / "taken").mkdir()
    return str(root / "taken")


@pytest.mark.parametrize(
    ("port_file", "why", "unix", "code"),
    [
        pytest.param(_a_directory, "Is a directory", False, None, id="a-directory-tcp"),
        pytest.param(_a_directory, "Is a directory", True, None, id="a-directory-unix"),
        pytest.param(lambda _: "/proc/nope", "No such file or directory", True, None,
                     id="proc-makes-no-files"),
        pytest.param(lambda root: str(root / "port"), "No space left on device", True,
                     FAILS_LATE, id="write-fails-after-binding"),
    ],
)  # fmt: skip
def test_a_port_file_that_cannot_be_written(
    short_dir: Path, port_file: Callable[[Path], str], why: str, unix: bool, code: str | None
) -> None:
    """One line naming --port-file and why, exit 2, nothing on stdout, no traceback; a
    failure after binding stops the daemon as SIGTERM does, leaving no socket or halts file."""
    path = port_file(short_dir)
    before = set(os.listdir(short_dir))
    listen = [f"unix:{short_dir}/kp.sock", "127.0.0.1:0"] if unix else ["127.0.0.1:0"]
    out = _serve(path, *listen, code=code)
    assert (out.returncode, out.stdout) == (2, ""), out.stderr
    error = (
        f"kernelpolicy: error: --port-file {path}: cannot write ({why}); expected a file path "
        "in a writable directory"
    )
    assert out.stderr.splitlines()[-1] == error
    assert "Traceback" not in out.stderr
    assert "never awaited" not in out.stderr
    if code is None:  # refused before binding: the error is all that is said
        assert out.stderr == error + "\n"
    assert set(os.listdir(short_dir)) == before


@pytest.mark.parametrize(
    "existing",
    [pytest.param(False, id="new-file"), pytest.param(True, id="existing-file-replaced")],
)
def test_a_writable_port_file_is_written_once_bound(short_dir: Path, existing: bool) -> None:
    """The check before binding leaves no new file behind (watchers wait for it to appear
    once the daemon listens) and an existing one as it was."""
    port = short_dir / "port"
    if existing:
        port.write_text("stale\n")
    from kernelpolicy.cli.port_file import check_port_file

    check_port_file(port)
    assert port.exists() is existing
    if existing:
        assert port.read_text() == "stale\n"
