"""A daemon socket this user may not connect to is said as such, not as "no daemon" (a first-day
review: a non-root user asking root's daemon was told none answered, "Permission denied")."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from kernelpolicy.errors import DaemonError
from kernelpolicy.server.sockets import peer_uid
from tests.helpers import said_as_user


def _peer_uid_as(uid: int, path: Path) -> str:
    """``peer_uid(path)`` run by ``uid``: the uid found, or the error's words."""

    def asked() -> str:
        try:
            return str(peer_uid(path, timeout=5.0))
        except DaemonError as exc:
            return str(exc)

    return said_as_user(uid, asked)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a child as another user")
@pytest.mark.parametrize(
    ("mode", "uid", "said"),
    [
        pytest.param(0o600, 1001, "not answering (permission denied: only the daemon's own user "
                     "and root may connect to it (you are uid 1001)", id="another-user"),
        pytest.param(0o600, 0, "0", id="the-daemons-user"),
    ],
)  # fmt: skip
def test_a_socket_one_may_not_use_says_so(mode: int, uid: int, said: str) -> None:
    directory = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))  # pytest's own is 0700
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        directory.chmod(0o755)
        path = directory / "kp.sock"
        listener.bind(str(path))
        listener.listen(4)
        path.chmod(mode)
        assert said in _peer_uid_as(uid, path)
    finally:
        listener.close()
        shutil.rmtree(directory)
