"""The local trust boundary: files another user owns or can write are refused, with the reason."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kernelpolicy.errors import UntrustedFileError
from kernelpolicy.trust import (
    check_trusted,
    owner_mode_problem,
    owner_only_group,
    private_dir,
    sole_member,
    trust_problem,
)
from tests.helpers import alone_in, getent, make_group_writable

OTHER_UID = 65534  # nobody

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def _file(tmp_path: Path, mode: int = 0o644) -> Path:
    path = tmp_path / "p.toml"
    path.write_text("x")
    path.chmod(mode)
    return path


@pytest.mark.parametrize(
    ("mode", "group", "problem"),
    [
        pytest.param(0o644, "own", None, id="0644"),
        pytest.param(0o600, "own", None, id="0600"),
        pytest.param(0o664, "shared", "writable by its group", id="group-writable-shared"),
        pytest.param(0o664, "private", None, id="group-writable-owner-alone"),
        pytest.param(0o664, "root", "writable by its group", id="group-writable-root-group"),
        pytest.param(0o666, "own", "writable by others", id="world-writable"),
    ],
)
def test_file_modes(tmp_path: Path, mode: int, group: str, problem: str | None) -> None:
    """Other write access is refused, and group write unless the group is the owner's alone
    (a user-private group, as `umask 002` checkouts have), naming the mode."""
    tmp_path.chmod(0o755)
    path = _file(tmp_path, mode)
    if group != "own":
        if os.geteuid() != 0:
            pytest.skip("chgrp to a chosen group needs root")
        if group == "shared":
            make_group_writable(path, mode)
        elif group == "root":
            os.chown(path, -1, 0)
        elif os.getegid() == 0 or not alone_in(os.getegid(), os.geteuid()):
            pytest.skip("the user running the tests has no private group other than root's")
        else:
            os.chown(path, -1, os.getegid())
    found = trust_problem(path)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert problem in found
        assert f"{mode:04o}" in found


@needs_root
def test_file_owned_by_another_user(tmp_path: Path) -> None:
    """A file owned by another non-root user is refused, naming the owner."""
    tmp_path.chmod(0o755)
    path = _file(tmp_path)
    os.chown(path, OTHER_UID, OTHER_UID)
    with pytest.raises(UntrustedFileError, match=f"owned by uid {OTHER_UID}"):
        check_trusted(path, "policy file")
    check_trusted(path, "policy file", allow_untrusted=True)  # the explicit opt-out


def test_writable_directory_is_refused(tmp_path: Path) -> None:
    """A directory others can write lets them swap the file: refused."""
    tmp_path.chmod(0o777)
    with pytest.raises(UntrustedFileError, match="writable by others"):
        check_trusted(_file(tmp_path), "policy file")


def test_symlink_is_judged_by_its_target(tmp_path: Path) -> None:
    """A trusted link to a world-writable file is refused (the real file is what is read)."""
    tmp_path.chmod(0o755)
    target = _file(tmp_path, 0o666)
    link = tmp_path / "link.toml"
    link.symlink_to(target)
    assert "writable by others" in (trust_problem(link) or "")


def test_sticky_root_directory_is_fine(tmp_path: Path) -> None:
    """A file of ours in a root-owned sticky directory (/tmp) cannot be swapped by others."""
    if os.stat("/tmp").st_uid != 0 or not os.stat("/tmp").st_mode & stat.S_ISVTX:
        pytest.skip("/tmp is not a root-owned sticky directory here")
    path = Path("/tmp") / f"kp-trust-{os.getpid()}.toml"
    path.write_text("x")
    try:
        path.chmod(0o644)
        assert trust_problem(path) is None
    finally:
        path.unlink()


def _stat(kind: int, mode: int, uid: int, gid: int | None = None) -> os.stat_result:
    return os.stat_result((kind | mode, 1, 1, 1, uid, uid if gid is None else gid, 0, 0, 0, 0))


NO_SUCH_GID = 2**31 - 5  # no group of that id: not the owner's own
PRIVATE_GID, SHARED_GID = 4242, 4243


def _groups(gid: int, uid: int) -> bool:
    """A user database where 4242 is the running user's private group and 4243 is shared:
    a machine where the tests run as a user with a private group, which CI (root) is not."""
    return gid == PRIVATE_GID and uid == os.geteuid()


@pytest.mark.parametrize(
    ("info", "problem"),
    [
        pytest.param(_stat(stat.S_IFREG, 0o644, os.geteuid()), None, id="own-file"),
        pytest.param(_stat(stat.S_IFREG, 0o644, 0), None, id="root-file"),
        pytest.param(_stat(stat.S_IFDIR, 0o755, os.geteuid()), None, id="own-directory"),
        pytest.param(_stat(stat.S_IFDIR, 0o1777, 0), None, id="sticky-root-directory"),
        pytest.param(
            _stat(stat.S_IFREG, 0o644, OTHER_UID), "owned by uid 65534", id="another-owner"
        ),
        pytest.param(
            _stat(stat.S_IFREG, 0o664, os.geteuid(), NO_SUCH_GID),
            "writable by its group",
            id="group-write-unknown-group",
        ),
        pytest.param(
            _stat(stat.S_IFREG, 0o664, os.geteuid(), PRIVATE_GID),
            None,
            id="group-write-owner-alone",
        ),
        pytest.param(
            _stat(stat.S_IFDIR, 0o775, os.geteuid(), PRIVATE_GID), None, id="directory-owner-alone"
        ),
        pytest.param(
            _stat(stat.S_IFREG, 0o664, os.geteuid(), SHARED_GID),
            "group gid 4243 not the owner's alone",
            id="group-write-shared",
        ),
        pytest.param(
            _stat(stat.S_IFREG, 0o664, 0, 0), "writable by its group", id="root-group-never"
        ),
        pytest.param(
            _stat(stat.S_IFREG, 0o666, os.geteuid(), PRIVATE_GID),
            "writable by others",
            id="other-write-despite-private-group",
        ),
        pytest.param(
            _stat(stat.S_IFDIR, 0o1777, os.geteuid()),
            "writable by others",
            id="sticky-not-root",
            marks=pytest.mark.skipif(os.geteuid() == 0, reason="run as root, ours is root's"),
        ),
        pytest.param(
            _stat(stat.S_IFREG, 0o1666, 0), "writable by others", id="sticky-file-not-directory"
        ),
    ],
)
def test_owner_mode_rule(info: os.stat_result, problem: str | None) -> None:
    """The one rule, on a stat result: root or us as owner, no other write except a root-owned
    sticky directory, no group write except by a group of the owner alone."""
    found = owner_mode_problem(info, alone=_groups)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert problem in found


@pytest.mark.parametrize(
    ("owner", "primary", "listed", "alone"),
    [
        pytest.param(1000, [1000], [], True, id="primary-group-of-the-owner"),
        pytest.param(1000, [1000], ["alice"], True, id="also-listed-by-name"),
        pytest.param(1000, [], ["alice"], True, id="listed-only"),
        pytest.param(1000, [1000, 1001], [], False, id="another-primary-member"),
        pytest.param(1000, [1000], ["bob"], False, id="another-listed-member"),
        pytest.param(1000, [1000], ["ghost"], False, id="listed-name-without-account"),
        pytest.param(1000, [1001], [], False, id="owner-not-a-member"),
        pytest.param(1000, [], [], False, id="no-member"),
    ],
)
def test_sole_member(owner: int, primary: list[int], listed: list[str], alone: bool) -> None:
    """Group write is the owner's alone when every member, primary or listed, is the owner."""
    assert sole_member(owner, primary, listed, {"alice": 1000, "bob": 1001}) is alone


def test_owner_only_group_agrees_withgetent() -> None:
    """Every group of this machine, for each of its primary members and root, judged as
    `getent` shows the databases."""
    accounts = getent("passwd")
    for row in getent("group"):
        gid = int(row[2])
        for uid in {0, *(int(a[2]) for a in accounts if int(a[3]) == gid)}:
            assert owner_only_group(gid, uid) is alone_in(gid, uid), (gid, uid)
    assert owner_only_group(NO_SUCH_GID, 0) is False


def test_private_dir_is_created_0700(tmp_path: Path) -> None:
    """A private directory is created (or tightened) to 0700."""
    made = private_dir(tmp_path / "a" / "b", "evidence store")
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    made.chmod(0o755)
    assert stat.S_IMODE(private_dir(made, "evidence store").stat().st_mode) == 0o700


def test_private_dir_refuses_a_link(tmp_path: Path) -> None:
    """A symbolic link where the directory should be is refused: it could point anywhere."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(UntrustedFileError, match="not a directory"):
        private_dir(tmp_path / "link", "evidence store")


@needs_root
def test_private_dir_refuses_another_owner(tmp_path: Path) -> None:
    """A directory someone else made first is refused, naming its owner."""
    planted = tmp_path / "store"
    planted.mkdir(mode=0o700)
    os.chown(planted, OTHER_UID, OTHER_UID)
    with pytest.raises(UntrustedFileError, match=f"owned by uid {OTHER_UID}"):
        private_dir(planted, "evidence store")


def test_private_dir_that_cannot_be_created_is_an_untrusted_file_error(tmp_path: Path) -> None:
    """An OSError while creating the directory (here: its parent is a file) is an
    UntrustedFileError naming the directory, not a raw exception."""
    (tmp_path / "file").write_text("x")
    with pytest.raises(UntrustedFileError, match="cannot prepare evidence store"):
        private_dir(tmp_path / "file" / "store", "evidence store")
