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

It leads a session of its own, and whatever is left of its process group when it ends is
killed, however it ends: past its seconds, failing or done (a compiler it ran, ``ptxas`` or
``ninja``, and left behind would otherwise outlive the build). The group is killed before the
build process is reaped, so its id is still its group's and never another's; its output is
read whatever bytes it writes.

Used by the Triton sampler's background build (:mod:`.sampling_triton.child`) and by
``kernelpolicy warm``'s builds (:mod:`kernelpolicy.warming`). It imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kernelpolicy.yielding import only_waiting

__all__ = ["WORKING_DIRECTORY", "Ended", "build_environment", "python_command", "run_build"]

WORKING_DIRECTORY = "/"  # root's own: nobody else can put a module there
_REAP_SECONDS = 5.0  # after the kill: the pipes' last bytes, unless a process left the group
_POLL_SECONDS = 0.05  # how often its end is looked for where no pidfd tells of it
_CHUNK = 65536
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
    error). When it ends, past ``seconds`` or when this thread is interrupted, whatever is
    left of its process group is killed: the compilers it started (``ptxas``, ``ninja``,
    ``nvcc``) end with it, whether it succeeded, failed or was killed.

    Raises:
        subprocess.TimeoutExpired: It outlasted ``seconds`` (it is killed, with its group).
        OSError: It could not be started (fork or exec refused, a missing binary).
    """
    with selectors.DefaultSelector() as selector:  # made first: nothing fails once it runs
        process = subprocess.Popen(
            list(argv), env=dict(env), cwd=WORKING_DIRECTORY, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        output = _Output(process, selector)
        try:
            with only_waiting():  # a compiler's minutes: kernelpolicy.yielding
                ended = output.read_until_ended(time.monotonic() + seconds)
        finally:
            _kill_group(process, output)
    if not ended:
        raise subprocess.TimeoutExpired(process.args, seconds)
    return Ended(process.returncode, *output.text())


def _has_ended(pid: int) -> bool:
    """Whether the child ``pid`` has ended, its status left for :meth:`Popen.wait` to reap (so
    that until then ``pid`` stays its group's id, never another process's)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped by someone else: nothing left to wait for
        return True


def _exit_watch(pid: int) -> int | None:
    """A pidfd that turns readable when ``pid`` ends; None where the kernel has none
    (before Linux 5.3), and its end is then looked for every :data:`_POLL_SECONDS`."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


class _Output:
    """A build process's stdout and stderr, read as they come so that neither fills."""

    def __init__(self, process: subprocess.Popen[bytes], selector: selectors.BaseSelector) -> None:
        assert process.stdout is not None  # started with PIPE
        assert process.stderr is not None
        self._process = process
        self._pipes = (process.stdout, process.stderr)
        self._fds = (process.stdout.fileno(), process.stderr.fileno())
        self._read: dict[int, bytearray] = {fd: bytearray() for fd in self._fds}
        self._selector = selector
        for fd in self._read:
            self._selector.register(fd, selectors.EVENT_READ)

    def read_until_ended(self, deadline: float) -> bool:
        """Read until the process has ended (not yet reaped) or ``deadline``: whether it ended."""
        watch = _exit_watch(self._process.pid)
        if watch is not None:
            self._selector.register(watch, selectors.EVENT_READ)
        try:
            while not _has_ended(self._process.pid):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._read_ready(left if watch is not None else min(left, _POLL_SECONDS))
            return True
        finally:
            if watch is not None:
                self._selector.unregister(watch)
                os.close(watch)

    def drain(self, seconds: float) -> None:
        """Read to the end of both pipes, for at most ``seconds``; then close them."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0 and self._reading():
            self._read_ready(left)
        for pipe in self._pipes:
            pipe.close()

    def text(self) -> tuple[str, str]:
        """Its stdout and stderr as text."""
        stdout, stderr = (bytes(self._read[fd]) for fd in self._fds)
        return _text(stdout), _text(stderr)

    def _reading(self) -> bool:
        return any(fd in self._read for fd in self._selector.get_map())

    def _read_ready(self, seconds: float) -> None:
        for key, _ in self._selector.select(seconds):
            if key.fd not in self._read:
                continue  # the pidfd: the loop looks at the status itself
            data = os.read(key.fd, _CHUNK)
            if data:
                self._read[key.fd] += data
            else:
                self._selector.unregister(key.fd)


def _kill_group(process: subprocess.Popen[bytes], output: _Output) -> None:
    """Kill whatever is left of the group ``process`` leads (not yet reaped, so its group id
    is still its own), read the pipes' last bytes and reap it; a process that left the group
    and holds the pipes does not hold us."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    output.drain(_REAP_SECONDS)
    process.wait()
