"""The node's halts file cannot be blocked by another user, and a write that fails shows
(review: a non-root daemon's explicit socket in /tmp was accepted, its halts file lived there,
with a temporary name then guessable, ``.x.halts.json.<pid>.tmp``, and a name another user took
first made every publication fail, only logged as ``kernelpolicy.halts.unpublished``). The
temporary names are unpredictable now (``safeio.write_atomic``); the names beside the socket
are kept from others by the socket directory's rule, kernelpolicy.trust's without its sticky
exception."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kernelpolicy.errors import DaemonError
from kernelpolicy.server.sockets import prepare_socket
from kernelpolicy.trust import owner_mode_problem
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
    notwithstanding (the report socket, the halts file): the daemon refuses it in one line that
    says what to use instead."""
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


def _directory(uid: int, mode: int) -> os.stat_result:
    return os.stat_result((stat.S_IFDIR | mode, 1, 1, 2, uid, 0, 0, 0, 0, 0))


@pytest.mark.parametrize(
    ("uid", "mode", "trusted", "socket_ok"),
    [
        pytest.param(0, 0o1777, True, False, id="root-sticky-like-tmp"),
        pytest.param(0, 0o1770, True, False, id="root-sticky-group-writable"),
        pytest.param(0, 0o0777, False, False, id="root-world-writable"),
        pytest.param(0, 0o0755, True, True, id="root-0755"),
        pytest.param(os.geteuid(), 0o0700, True, True, id="ours-0700"),
        pytest.param(OTHER, 0o0700, False, False, id="another-user's"),
    ],
)
def test_the_socket_directory_rule_is_trusts_without_the_sticky_exception(
    uid: int, mode: int, trusted: bool, socket_ok: bool
) -> None:
    """One directory-trust rule: where trust lets a root-owned sticky directory pass (nobody
    else can replace what is in it), a socket's directory is refused (others can take the names
    beside the socket), and everywhere else the two agree."""
    info = _directory(uid, mode)
    assert (owner_mode_problem(info) is None) == trusted
    refused = owner_mode_problem(info, sticky_passes=False)
    assert (refused is None) == socket_ok
    if not socket_ok and uid != OTHER:
        assert "expected no group or other write (chmod go-w)" in (refused or "")


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
