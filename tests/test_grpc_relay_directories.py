"""A daemon killed before it could remove its relay directory (server/grpc_relay.py) left
/tmp/kernelpolicy-grpc-* behind for good. The next daemon of the same user removes those of
daemons that are gone, and nothing else: not a running daemon's, not another user's, not a link,
not a directory holding anything but the relay's socket."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kernelpolicy.server import grpc_relay
from kernelpolicy.server.grpc_relay import GrpcRelay, remove_stale_directories

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


@pytest.fixture
def parent() -> Iterator[Path]:
    """A short directory in /tmp: a unix socket's path must fit 107 bytes."""
    where = Path(tempfile.mkdtemp(prefix="kp-relay-", dir="/tmp"))
    yield where
    shutil.rmtree(where, ignore_errors=True)


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def _relay_directory(parent: Path, pid: int) -> Path:
    """A relay directory as a daemon of ``pid`` leaves it: 0700, its socket bound inside."""
    directory = Path(tempfile.mkdtemp(prefix=f"kernelpolicy-grpc-{pid}-", dir=parent))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(directory / "grpc.sock"))
    sock.close()
    return directory


def _dead_daemons(parent: Path) -> Path:
    return _relay_directory(parent, _dead_pid())


def _running_daemons(parent: Path) -> Path:
    return _relay_directory(parent, os.getpid())


def _another_users(parent: Path) -> Path:
    directory = _relay_directory(parent, _dead_pid())
    os.chown(directory, 65534, 65534)
    return directory


def _a_link(parent: Path) -> Path:
    target = _relay_directory(parent / "elsewhere", _dead_pid())
    link = parent / f"kernelpolicy-grpc-{_dead_pid()}-link"
    link.symlink_to(target, target_is_directory=True)
    return link


def _with_other_content(parent: Path) -> Path:
    directory = _relay_directory(parent, _dead_pid())
    (directory / "notes.txt").write_text("not the relay's")
    return directory


LISTENING: list[socket.socket] = []  # sockets a case keeps listening until the test ends


def _another_namespaces(parent: Path) -> Path:
    """A daemon in another PID namespace sharing /tmp: its PID runs nowhere here, but its
    socket answers."""
    directory = Path(tempfile.mkdtemp(prefix=f"kernelpolicy-grpc-{_dead_pid()}-", dir=parent))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(directory / "grpc.sock"))
    sock.listen()
    LISTENING.append(sock)
    return directory


def _socket_not_made_yet(parent: Path) -> Path:
    """A daemon between making its directory and binding its socket."""
    return Path(tempfile.mkdtemp(prefix=f"kernelpolicy-grpc-{_dead_pid()}-", dir=parent))


def _not_a_relay_name(parent: Path) -> Path:
    directory = parent / "kernelpolicy-grpc-notapid"
    directory.mkdir()
    return directory


@pytest.mark.parametrize(
    ("plant", "removed"),
    [
        pytest.param(_dead_daemons, True, id="a-dead-daemons-is-removed"),
        pytest.param(_running_daemons, False, id="a-running-daemons-is-kept"),
        pytest.param(_another_users, False, id="another-users-is-kept", marks=needs_root),
        pytest.param(_a_link, False, id="a-link-is-kept"),
        pytest.param(_with_other_content, False, id="other-content-is-kept"),
        pytest.param(_another_namespaces, False, id="a-socket-that-answers-is-kept"),
        pytest.param(_socket_not_made_yet, False, id="a-socket-not-made-yet-is-kept"),
        pytest.param(_not_a_relay_name, False, id="another-name-is-kept"),
    ],
)  # fmt: skip
def test_only_a_dead_daemons_relay_directory_is_removed(
    plant: Callable[[Path], Path], removed: bool, parent: Path
) -> None:
    (parent / "elsewhere").mkdir()
    planted = plant(parent)
    try:
        assert remove_stale_directories(str(parent)) == ([str(planted)] if removed else [])
    finally:
        while LISTENING:
            LISTENING.pop().close()
    assert os.path.lexists(planted) is not removed
    assert len(list((parent / "elsewhere").iterdir())) == (1 if plant is _a_link else 0)


def test_a_new_relay_removes_them_and_names_its_own_for_its_process(
    parent: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stale = _dead_daemons(parent)
    monkeypatch.setattr(tempfile, "tempdir", str(parent))
    relay = GrpcRelay(total=4)
    try:
        assert not stale.exists()
        assert Path(relay.path).parent.name.startswith(f"kernelpolicy-grpc-{os.getpid()}-")
    finally:
        relay.close()
    assert list(parent.iterdir()) == []


def test_a_crowded_temp_directory_costs_a_bounded_scan(
    parent: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(grpc_relay, "MAX_RELAY_SCAN_ENTRIES", 2)
    stale = [_dead_daemons(parent) for _ in range(3)]
    assert len(remove_stale_directories(str(parent))) == 2
    assert sum(path.exists() for path in stale) == 1
