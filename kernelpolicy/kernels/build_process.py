"""A kernel build's own process, started where nobody else's code can slip in.

``python -m MODULE`` puts the current directory first on the child's ``sys.path``, so a build
started from a directory another user can write (``/tmp``, a shared scratch directory) would
import their ``kernelpolicy/`` or ``json.py`` as the user who builds: root, in a DaemonSet.
A build process is therefore started with ``-P`` (Python >= 3.11: no directory of the script
or the current one on ``sys.path``), in the fixed directory :data:`WORKING_DIRECTORY` (an
empty ``PYTHONPATH`` entry, which means the current directory, then means ``/``) and with no
standard input. It finds kernelpolicy where its parent did: the directory the parent imported
it from comes first on ``PYTHONPATH`` (a checkout run with ``PYTHONPATH`` or an editable
install alike), unless that is a site-packages directory, which the child's own start-up adds
after the standard library as it did for the parent.

Its time limit holds for all it started: it leads a session of its own, and past its seconds
the whole process group is killed (a compiler it ran, ``ptxas`` or ``ninja``, would otherwise
outlive the limit); its output is read whatever bytes it writes.

Used by the Triton sampler's background build (:mod:`.sampling_triton.child`) and by
``kernelpolicy warm``'s builds (:mod:`kernelpolicy.warming`). It imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["WORKING_DIRECTORY", "Ended", "build_environment", "python_command", "run_build"]

WORKING_DIRECTORY = "/"  # root's own: nobody else can put a module there
_REAP_SECONDS = 5.0  # after the kill: the pipes' last bytes, unless a process left the group
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the directory holding kernelpolicy/


def python_command(executable: str, module: str) -> list[str]:
    """``executable -P -m module``: the module, never a file of the current directory."""
    return [executable, "-P", "-m", module]


def _site_directories() -> frozenset[str]:
    import site

    found = [*site.getsitepackages(), site.getusersitepackages()]
    return frozenset(os.path.realpath(path) for path in found)


def build_environment(
    env: Mapping[str, str],
    *,
    root: str = _PACKAGE_ROOT,
    site_directories: frozenset[str] | None = None,
) -> dict[str, str]:
    """``env`` with ``root`` (where this kernelpolicy was imported from) first on
    ``PYTHONPATH``, unless it is one of ``site_directories`` (default: this interpreter's
    site-packages), which the child finds by itself and which must not come before the
    standard library."""
    sites = _site_directories() if site_directories is None else site_directories
    if os.path.realpath(root) in sites:
        return dict(env)
    path = env.get("PYTHONPATH", "")
    return {**env, "PYTHONPATH": root + (os.pathsep + path if path else "")}


@dataclass(frozen=True)
class Ended:
    """How a build process ended.

    Attributes:
        code: Its exit status.
        stdout: What it printed.
        stderr: What it said on stderr.
    """

    code: int
    stdout: str
    stderr: str


def _text(data: bytes) -> str:
    """A build's output as text, whatever bytes it wrote (a compiler naming a Latin-1 path)."""
    return data.decode("utf-8", errors="replace")


def run_build(argv: Sequence[str], env: Mapping[str, str], seconds: float) -> Ended:
    """Run ``argv`` in :data:`WORKING_DIRECTORY` with no standard input, in a session of its
    own, and wait for it; its output is read as UTF-8, a byte that is not replaced (never an
    error). Past ``seconds`` (or when this thread is interrupted) its whole process group is
    killed: the compilers it started (``ptxas``, ``ninja``, ``nvcc``) end with it.

    Raises:
        subprocess.TimeoutExpired: It outlasted ``seconds`` (it is killed, with its group).
        OSError: It could not be started (fork or exec refused, a missing binary).
    """
    process = subprocess.Popen(
        list(argv), env=dict(env), cwd=WORKING_DIRECTORY, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = process.communicate(timeout=seconds)
    except BaseException:
        _kill_group(process)
        raise
    return Ended(process.returncode, _text(stdout), _text(stderr))


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """Kill the group ``process`` leads (not yet reaped, so its group id is still its own),
    then reap it; a process that left the group and holds its pipes does not hold us."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    try:
        process.communicate(timeout=_REAP_SECONDS)
    except subprocess.TimeoutExpired:
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
        process.wait()
