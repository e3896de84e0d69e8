"""serve --port-file where another user can reach it (review: as root, with nobody's files
planted in a sticky /tmp directory, a link made the daemon overwrite a root-owned 0600 file with
its address, a FIFO with a reader hung it past SIGTERM, and a 0666 file stayed nobody's, who
then rewrote the address to steer clients). Each is refused before anything is bound; the file
is written whole beside its name and renamed, never through what is there, and removed when the
daemon stops if it is still the one written."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kernelpolicy import safeio
from kernelpolicy.cli.port_file import check_port_file, remove_port_file, write_port_file
from kernelpolicy.errors import DaemonError
from tests.helpers import ROOT, said_as_user, wait_until
from tests.serve_process import serve_env

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to plant as another user")

NOBODY = 65534
CPU = str(ROOT / "kernelpolicy/fixtures/platforms/cpu.json")
SECRET = "root's own words\n"
REFUSED = (
    "is there; expected no file, or a regular file of root's or uid 0's (you) to replace; "
    "refusing to write through it (remove it yourself if it is stale)"
)


@pytest.fixture
def sticky() -> Iterator[Path]:
    """A root-owned world-writable directory with the sticky bit under /tmp, as /tmp is."""
    directory = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))
    directory.chmod(0o1777)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _as_nobody(plant: Callable[[], object]) -> None:
    said_as_user(NOBODY, lambda: str(plant() or ""))


def _secret(directory: Path) -> Path:
    secret = directory / "secret"
    secret.write_text(SECRET)
    secret.chmod(0o600)
    return secret


def _link(directory: Path) -> Callable[[], str]:
    secret = _secret(directory)
    _as_nobody(lambda: os.symlink(secret, directory / "kp.port"))
    return lambda: f"{os.readlink(directory / 'kp.port')} {secret.read_text()!r}"


_READERS: list[int] = []  # the planted FIFOs' readers, closed after each test


@pytest.fixture(autouse=True)
def _close_readers() -> Iterator[None]:
    yield
    while _READERS:
        os.close(_READERS.pop())


def _fifo(directory: Path) -> Callable[[], str]:
    _as_nobody(lambda: os.mkfifo(directory / "kp.port", 0o666))
    reader = os.open(directory / "kp.port", os.O_RDONLY | os.O_NONBLOCK)  # held by the test
    _READERS.append(reader)
    return lambda: f"{stat.S_ISFIFO((directory / 'kp.port').lstat().st_mode)} {reader}"


def _nobodys_file(directory: Path) -> Callable[[], str]:
    def plant() -> None:
        (directory / "kp.port").write_text("127.0.0.1:6666\n")
        (directory / "kp.port").chmod(0o666)

    _as_nobody(plant)
    return lambda: f"{(directory / 'kp.port').stat().st_uid} {(directory / 'kp.port').read_text()}"


def _open_directory(directory: Path) -> Callable[[], str]:
    directory.chmod(0o777)  # no sticky bit: anyone may rename what is in it
    return lambda: str(sorted(os.listdir(directory)))


def _nobodys_directory(directory: Path) -> Callable[[], str]:
    directory.chmod(0o755)
    os.chown(directory, NOBODY, NOBODY)
    return lambda: str(sorted(os.listdir(directory)))


def _open_directory_above(directory: Path) -> Callable[[], str]:
    directory.chmod(0o777)
    (directory / "sub").mkdir(mode=0o700)
    return lambda: str(sorted(os.listdir(directory / "sub")))


def _serve(port_file: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kernelpolicy", "serve", "--no-watch", "--platform", CPU,
         "--listen", "127.0.0.1:0", "--port-file", str(port_file)],
        capture_output=True, text=True, timeout=timeout, check=False, env=serve_env(), cwd=ROOT,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("plant", "name", "said"),
    [
        pytest.param(_link, "kp.port", f"a symbolic link owned by uid {NOBODY} {REFUSED}",
                     id="nobodys-link-to-a-root-file"),
        pytest.param(_fifo, "kp.port", f"a FIFO owned by uid {NOBODY} {REFUSED}",
                     id="nobodys-fifo-with-a-reader"),
        pytest.param(_nobodys_file, "kp.port", f"a file owned by uid {NOBODY} {REFUSED}",
                     id="nobodys-0666-file"),
        pytest.param(_open_directory, "kp.port", "writable by others (mode 0777, owner uid 0)",
                     id="directory-others-write-without-sticky-bit"),
        pytest.param(_nobodys_directory, "kp.port", f"owned by uid {NOBODY} (mode 0755)",
                     id="directory-of-another-user"),
        pytest.param(_open_directory_above, "sub/kp.port",
                     "a directory above it can be written by another user",
                     id="directory-above-others-write"),
    ],
)  # fmt: skip
def test_a_port_file_another_user_can_reach_is_refused_before_binding(
    sticky: Path, plant: Callable[[Path], Callable[[], str]], name: str, said: str
) -> None:
    """Exit 2 with one line naming --port-file, the path and what was expected, nothing on
    stdout (nothing bound), and what was planted (and what it points to) as it was."""
    state = plant(sticky)
    before = state()
    port = sticky / name
    out = _serve(port, timeout=60)
    assert (out.returncode, out.stdout) == (2, ""), out.stderr
    assert out.stderr.startswith(f"kernelpolicy: error: --port-file {port}: "), out.stderr
    assert said in out.stderr
    assert out.stderr.count("\n") == 1, out.stderr
    assert state() == before


@pytest.mark.parametrize(
    "plant",
    [
        pytest.param(lambda port: os.symlink(port.with_name("secret"), port), id="a-link"),
        pytest.param(lambda port: os.mkfifo(port, 0o666), id="a-fifo-nobody-reads"),
        pytest.param(lambda port: port.write_text("127.0.0.1:6666\n"), id="a-file"),
    ],
)
def test_what_is_planted_after_the_check_is_replaced_never_written_through(
    sticky: Path, plant: Callable[[Path], object]
) -> None:
    """Planted by nobody between the check and the write: the write neither follows a link
    (root's file keeps its words) nor waits on a FIFO; the name is then root's own regular
    file, mode 0644, holding the addresses, which nobody may rename in the sticky directory."""
    port = sticky / "kp.port"
    secret = _secret(sticky)
    assert check_port_file(port) == port
    _as_nobody(lambda: plant(port))
    done: list[tuple[int, int]] = []
    writer = threading.Thread(
        target=lambda: done.append(write_port_file(port, ["unix:/a"])), daemon=True
    )
    writer.start()
    writer.join(timeout=30)  # a bound on a hang (the old write blocked on a FIFO forever)
    assert done, "the write did not return"
    info = port.lstat()
    assert (stat.S_ISREG(info.st_mode), info.st_uid, stat.S_IMODE(info.st_mode)) == (True, 0, 0o644)
    assert done == [(info.st_dev, info.st_ino)]
    assert port.read_text() == "unix:/a\n"
    assert secret.read_text() == SECRET


def test_a_directory_reached_through_a_link_is_checked_and_written_where_it_leads(
    sticky: Path, short_dir: Path
) -> None:
    """A link to a private directory (planted in /tmp, where its owner can aim it elsewhere
    later) is resolved once: the file goes where the directory was checked."""
    os.symlink(short_dir, sticky / "link")
    assert check_port_file(sticky / "link" / "kp.port") == short_dir / "kp.port"


def test_check_refuses_in_process_too(sticky: Path) -> None:
    """check_port_file raises DaemonError (a KernelPolicyError), not an OSError."""
    _link(sticky)
    with pytest.raises(DaemonError, match="a symbolic link owned by uid 65534"):
        check_port_file(sticky / "kp.port")


def _running(port: Path) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "kernelpolicy", "serve", "--no-watch", "--quiet", "--platform",
         CPU, "--listen", "127.0.0.1:0", "--port-file", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=serve_env(), cwd=ROOT,
    )  # fmt: skip

    def started() -> bool:
        assert process.poll() is None, process.communicate()
        return port.exists() and port.read_text().startswith("127.0.0.1:")

    wait_until(started, "serve wrote no port file", seconds=120)
    return process


@pytest.mark.parametrize(
    ("swap", "left"),
    [
        pytest.param(None, False, id="its-own-file-removed"),
        pytest.param("replaced", True, id="a-file-put-in-its-place-kept"),
    ],
)
def test_the_port_file_goes_when_the_daemon_stops_if_still_its_own(
    sticky: Path, swap: str | None, left: bool
) -> None:
    """In root's sticky directory the file is written root's, 0644, whole; SIGTERM removes it,
    but not a file someone (here root) put in its place meanwhile."""
    port = sticky / "kp.port"
    port.write_text("stale\n")  # root's own stale file: replaced
    process = _running(port)
    try:
        info = port.lstat()
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o644)
        assert port.read_text().startswith("127.0.0.1:")
        if swap is not None:
            port.with_name("other").write_text(swap)
            port.with_name("other").replace(port)
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert port.exists() is left
    assert [p.name for p in sticky.iterdir() if p.name.startswith(".")] == []  # no temp left


def test_the_stamp_is_the_file_written_not_what_took_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Someone replaces the port file right after the daemon's rename: the daemon's stamp is
    still its own file's, so its stop leaves theirs. Before, the stamp was read from the path
    after the write, and a replacement in between was taken for the daemon's own and removed
    (the full test run caught it: test_the_port_file_goes_when_the_daemon_stops_if_still_its_own
    failed once)."""
    port = tmp_path / "kp.port"
    replace = os.replace

    def replaced_at_once(source: str | Path, target: str | Path) -> None:
        replace(source, target)
        (tmp_path / "theirs").write_text("someone else's\n")
        replace(tmp_path / "theirs", target)

    monkeypatch.setattr(safeio.os, "replace", replaced_at_once)
    stamp = write_port_file(port, ["127.0.0.1:1"])
    monkeypatch.undo()
    remove_port_file(port, stamp)
    assert port.read_text() == "someone else's\n"


def test_a_directory_planted_at_the_old_temporary_name_does_not_stop_the_write(
    sticky: Path,
) -> None:
    """nobody's directory at ``.kp.port.<pid>.tmp`` in the sticky directory, where the port
    file was once written before its rename: the file is written all the same, and what was
    planted is left. Before, the write gave up (EISDIR) and serve exited 2 with "cannot write
    (Is a directory)" (the daemon writes it with this same call; in process here, since a
    daemon costs seconds)."""
    port = sticky / "kp.port"
    planted = sticky / f".kp.port.{os.getpid()}.tmp"
    _as_nobody(planted.mkdir)
    assert check_port_file(port) == port
    stamp = write_port_file(port, ["127.0.0.1:1"])
    assert port.read_text() == "127.0.0.1:1\n"
    assert (planted.is_dir(), planted.stat().st_uid) == (True, NOBODY)
    remove_port_file(port, stamp)
    assert sorted(p.name for p in sticky.iterdir()) == [planted.name]
