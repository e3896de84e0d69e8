"""A kernel build's own process (kernelpolicy/kernels/build_process.py): started where nobody
else's code can be imported (review: ``python -m`` put the current directory first on the
child's path, so a build started from /tmp ran another user's planted ``kernelpolicy/``), with
no standard input, finding kernelpolicy where its parent did."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kernelpolicy.kernels.build_process import (
    WORKING_DIRECTORY,
    build_environment,
    python_command,
    run_build,
)
from tests.helpers import said_as_user

OTHER = 65534  # nobody
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="planting as another user needs root")


@pytest.fixture
def shared_cwd(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The current directory is one every user may write (mode 1777, as /tmp is); pytest's own
    temporary directories are 0700, so it is made under /tmp."""
    directory = Path(tempfile.mkdtemp(prefix="kp-shared-", dir="/tmp"))
    directory.chmod(0o1777)
    monkeypatch.chdir(directory)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _plant(directory: Path, marker: Path) -> Callable[[], str]:
    """What the other user plants: a ``kernelpolicy`` package and a ``json`` module whose
    import writes ``marker``."""
    code = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"

    def plant() -> str:
        (directory / "kernelpolicy").mkdir()
        (directory / "kernelpolicy" / "__init__.py").write_text(code)
        (directory / "json.py").write_text(code)
        return "planted"

    return plant


def _background_build() -> str:
    from kernelpolicy.kernels.sampling_triton.child import Child

    with pytest.raises(RuntimeError) as failed:  # its task lacks every key: exit 1
        Child(seconds=300).compile({})
    return str(failed.value)


def _warm_build() -> str:
    from kernelpolicy.warming import build_in_process

    task = {"feature": "sampler.top_k_top_p", "impl": "triton", "vocab": 32000}  # no dtype
    return str(build_in_process(task, "cpu", dict(os.environ))["failed"])


@needs_root
@pytest.mark.parametrize(
    ("build", "said"),
    [
        pytest.param(_background_build, "KeyError: 'k_dtype'", id="background-build-child"),
        pytest.param(_warm_build, "KeyError: 'dtype'", id="warm-build-child"),
    ],
)
def test_a_build_child_never_imports_what_another_user_planted_in_the_current_directory(
    build: Callable[[], str], said: str, shared_cwd: Path, tmp_path: Path
) -> None:
    """Started from a directory another user planted ``kernelpolicy/`` and ``json.py`` in, the
    child runs the real kernelpolicy (its own error about the empty task says so) and imports
    nothing of theirs."""
    marker = tmp_path / "planted-code-ran"
    assert said_as_user(OTHER, _plant(shared_cwd, marker)) == "planted"
    assert said in build()
    assert not marker.exists(), marker.read_text()


def test_a_build_child_runs_in_a_fixed_directory_with_no_input(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Its current directory is WORKING_DIRECTORY whatever the parent's, and its standard input
    is empty (a child never reads the parent's terminal)."""
    monkeypatch.chdir(tmp_path)
    script = "import os, sys; print(os.getcwd(), repr(sys.stdin.read()), sys.path[0])"
    ended = run_build([sys.executable, "-P", "-c", script], dict(os.environ), 60)
    cwd, stdin, first = ended.stdout.split()
    assert (ended.code, cwd, stdin) == (0, WORKING_DIRECTORY, "''")
    assert first != str(tmp_path)


def test_the_build_command_keeps_the_current_directory_off_the_path() -> None:
    """``-P`` before ``-m``: the module, never a file of the current directory."""
    assert python_command("/usr/bin/python3", "a.b") == ["/usr/bin/python3", "-P", "-m", "a.b"]


@pytest.mark.parametrize(
    ("env", "root", "sites", "expected"),
    [
        pytest.param({}, "/src/checkout", frozenset(), "/src/checkout", id="checkout-first"),
        pytest.param(
            {"PYTHONPATH": "/a:/b"},
            "/src/checkout",
            frozenset(),
            "/src/checkout:/a:/b",
            id="checkout-before-the-given-path",
        ),
        pytest.param(
            {"PYTHONPATH": "/a"},
            "/usr/lib/site-packages",
            frozenset({"/usr/lib/site-packages"}),
            "/a",
            id="installed-found-by-site",
        ),
        pytest.param(
            {},
            "/usr/lib/site-packages",
            frozenset({"/usr/lib/site-packages"}),
            None,
            id="installed-no-path-added",
        ),
    ],
)
def test_the_child_finds_kernelpolicy_where_its_parent_did(
    env: dict[str, str], root: str, sites: frozenset[str], expected: str | None
) -> None:
    """The directory kernelpolicy was imported from comes first on PYTHONPATH (a checkout, an
    editable install), except a site-packages directory, which the child's start-up adds after
    the standard library as for its parent."""
    made = build_environment({"KEEP": "1", **env}, root=root, site_directories=sites)
    assert made.get("PYTHONPATH") == expected
    assert made["KEEP"] == "1"


def test_this_kernelpolicy_is_the_one_a_child_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run as its parent starts it (``-P``, from ``/``): the child imports this checkout's
    kernelpolicy, whether installed or only on PYTHONPATH."""
    import kernelpolicy

    monkeypatch.delenv("PYTHONPATH", raising=False)
    script = "import kernelpolicy; print(kernelpolicy.__file__)"
    ended = run_build([sys.executable, "-P", "-c", script], build_environment(os.environ), 60)
    assert ended.stdout.strip() == kernelpolicy.__file__


@pytest.mark.parametrize(
    ("printed", "stdout"),
    [
        pytest.param(b"ok", "ok", id="utf-8"),
        pytest.param(b"mod\xe8le", "mod\ufffdle", id="latin-1-replaced"),
        pytest.param(b"\xff\xfe", "\ufffd\ufffd", id="no-text-at-all"),
    ],
)
def test_a_build_s_output_is_read_whatever_bytes_it_writes(printed: bytes, stdout: str) -> None:
    """Output that is not UTF-8 (a compiler naming a Latin-1 path) is read with the bytes
    replaced, never a codec error."""
    script = (
        f"import sys; sys.stdout.buffer.write({printed!r}); sys.stderr.buffer.write({printed!r})"
    )
    ended = run_build([sys.executable, "-P", "-c", script], dict(os.environ), 60)
    assert (ended.code, ended.stdout, ended.stderr) == (0, stdout, stdout)


def test_a_background_build_whose_child_says_latin_1_fails_with_its_words(
    tmp_path: Path,
) -> None:
    """The background build's child failing with a Latin-1 message fails the variant with that
    message (bytes replaced), not with a codec error."""
    from kernelpolicy.kernels.sampling_triton.child import Child

    script = "import sys; sys.stdout.buffer.write(b'ptxas: /mod\\xe8le: error'); sys.exit(1)"
    child = Child(command=lambda: [sys.executable, "-c", script], environment=dict, seconds=60)
    with pytest.raises(RuntimeError, match="exit 1\\): ptxas: /mod\ufffdle: error"):
        child.compile({})


def _hangs_with_a_grandchild(
    tmp_path: Path, then: str = "sleep 600", start: str = "sleep 600 >/dev/null 2>&1 &"
) -> tuple[str, Path]:
    """A build process that starts a compiler of its own (by default a ``sleep`` that does not
    hold the output pipes), notes its pid, and then hangs (or does ``then``)."""
    pid_file = tmp_path / "grandchild.pid"
    script = tmp_path / "build"
    script.write_text(f"#!/bin/sh\n{start}\necho $! > {pid_file}\n{then}\n")
    script.chmod(0o755)
    return str(script), pid_file


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed and not yet reaped by its new parent, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


def _by_run_build(script: str, monkeypatch: pytest.MonkeyPatch) -> str:
    import subprocess

    with pytest.raises(subprocess.TimeoutExpired) as ended:
        run_build([script], dict(os.environ), 3)
    return str(ended.value)


def _by_background_build(script: str, monkeypatch: pytest.MonkeyPatch) -> str:
    from kernelpolicy.kernels.sampling_triton.child import Child

    with pytest.raises(RuntimeError) as failed:
        Child(command=lambda: [script], environment=lambda: dict(os.environ), seconds=3).compile({})
    return str(failed.value)


def _by_warm(script: str, monkeypatch: pytest.MonkeyPatch) -> str:
    from kernelpolicy import warming

    monkeypatch.setattr(sys, "executable", script)
    monkeypatch.setattr(warming, "TASK_SECONDS", 3)
    task = {"feature": "sampler.top_k_top_p", "impl": "triton", "dtype": "float32", "vocab": 1}
    return str(warming.build_in_process(task, "cuda:0", dict(os.environ))["failed"])


@pytest.mark.parametrize(
    ("run", "said"),
    [
        pytest.param(_by_run_build, "timed out after 3 seconds", id="run-build"),
        pytest.param(_by_background_build, "did not end within 3 s (killed)", id="background"),
        pytest.param(_by_warm, "over 3 s", id="warm"),
    ],
)
def test_a_build_past_its_seconds_is_killed_with_all_it_started(
    run: Callable[[str, pytest.MonkeyPatch], str],
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The time limit kills the build's whole process group: a compiler it started (here a
    ``sleep``) does not outlive it."""
    script, pid_file = _hangs_with_a_grandchild(tmp_path)
    assert said in run(script, monkeypatch)
    _assert_killed(int(pid_file.read_text()), "the build's own process outlived its time limit")


def _assert_killed(grandchild: int, why: str) -> None:
    """``grandchild`` ends (SIGKILL was sent; its delivery is the scheduler's), else ``why``;
    it is killed here whatever the outcome."""
    try:
        for _ in range(600):
            if not _alive(grandchild):
                break
            time.sleep(0.05)
        assert not _alive(grandchild), why
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(grandchild, 9)


def _no_pidfd(pid: int) -> int:
    raise OSError(38, "Function not implemented")  # ENOSYS: a kernel before Linux 5.3


@pytest.mark.parametrize(
    ("then", "start", "seconds", "ended", "pidfd"),
    [
        pytest.param("echo built", None, 60, (0, "built\n"), True, id="normal-exit"),
        pytest.param("echo no; exit 3", None, 60, (3, "no\n"), True, id="failing-exit"),
        pytest.param("sleep 600", None, 2, None, True, id="timeout"),
        pytest.param(
            "echo built",
            "sleep 600 &",
            60,
            (0, "built\n"),
            True,
            id="normal-exit-grandchild-holds-the-output",
        ),
        pytest.param("echo built", None, 60, (0, "built\n"), False, id="normal-exit-no-pidfd"),
        pytest.param("echo no; exit 3", None, 60, (3, "no\n"), False, id="failing-exit-no-pidfd"),
    ],
)
def test_what_a_build_left_of_its_group_is_killed_however_it_ends(
    then: str,
    start: str | None,
    seconds: float,
    ended: tuple[int, str] | None,
    pidfd: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A compiler the build process started and left behind is killed when it ends: done,
    failed or past its seconds (review: only the time limit killed the group), also where the
    left one holds the output pipes (the build's result comes when the build process ends,
    not at its time limit) and where the kernel has no pidfd to tell of its end."""
    import subprocess

    if not pidfd:
        monkeypatch.setattr(os, "pidfd_open", _no_pidfd)
    script, pid_file = _hangs_with_a_grandchild(tmp_path, then, *([start] if start else []))
    if ended is None:
        with pytest.raises(subprocess.TimeoutExpired):
            run_build([script], dict(os.environ), seconds)
    else:
        done = run_build([script], dict(os.environ), seconds)
        assert (done.code, done.stdout) == ended
    _assert_killed(int(pid_file.read_text()), "the build left a process of its group running")
