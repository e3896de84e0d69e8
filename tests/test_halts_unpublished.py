"""The node's halts file cannot be blocked by another user, and a write that fails shows
(review: a non-root daemon's explicit socket in /tmp was accepted, its halts file and the
guessable temporary name ``.x.halts.json.<pid>.tmp`` lived there, and a name another user took
first made every publication fail, only logged as ``kernelpolicy.halts.unpublished``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernelpolicy.errors import DaemonError
from kernelpolicy.server.sockets import prepare_socket
from tests.halts_helpers import halts_daemon
from tests.helpers import said_as_user

OTHER = 65534  # nobody
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="running as another user needs root")


def _prepare(address: str) -> str:
    try:
        prepare_socket(address, default=False)
    except DaemonError as exc:
        return f"refused: {exc}"
    return "ok"


@needs_root
@pytest.mark.parametrize(
    ("mode", "uid", "refused"),
    [
        pytest.param(0o1777, OTHER, True, id="sticky-like-tmp-non-root-daemon"),
        pytest.param(0o1777, 0, True, id="sticky-like-tmp-root-daemon"),
        pytest.param(0o1770, 0, True, id="sticky-group-writable"),
        pytest.param(0o0777, 0, True, id="world-writable"),
        pytest.param(0o0755, OTHER, False, id="root-owned-0755"),
        pytest.param(0o0700, 0, False, id="private-0700"),
    ],
)
def test_a_socket_whose_directory_others_may_write_is_refused(
    mode: int, uid: int, refused: bool, short_dir: Path
) -> None:
    """Others may take the names beside the socket in such a directory, the sticky bit
    notwithstanding (the report socket, the halts file and its temporary name): the daemon
    refuses it in one line that says what to use instead."""
    short_dir.chmod(mode)
    address = f"unix:{short_dir / 'kp.sock'}"
    said = said_as_user(uid, lambda: _prepare(address)) if uid else _prepare(address)
    if not refused:
        assert said == "ok"
        return
    assert said.startswith(f"refused: cannot listen on {address}: its directory {short_dir} ")
    assert f"mode {mode:04o}) may be written by another user" in said
    assert "the halts file" in said
    assert "$XDG_RUNTIME_DIR/kernelpolicy/" in said
    assert "\n" not in said


def test_a_failed_publication_is_counted_until_one_succeeds(short_dir: Path) -> None:
    """A halts file the daemon cannot write (here its name is taken by a directory) is counted
    in kernelpolicy_halts_unpublished, and not any more once a write succeeds."""
    with halts_daemon(short_dir) as daemon:
        assert daemon.unpublished() == "kernelpolicy_halts_unpublished 0.0"
        daemon.block()
        daemon.publish()
        assert daemon.listener.unpublished is not None
        assert daemon.unpublished() == "kernelpolicy_halts_unpublished 1.0"
        daemon.free()
        daemon.publish()
        assert daemon.listener.unpublished is None
        assert daemon.unpublished() == "kernelpolicy_halts_unpublished 0.0"
