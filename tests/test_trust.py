"""The local trust boundary: files another user owns or can write are refused, with the reason."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from kernelpolicy.errors import UntrustedFileError
from kernelpolicy.safeio import read_trusted_cache_bytes
from kernelpolicy.trust import (
    ancestors_problem,
    check_trusted,
    code_group,
    owner_mode_problem,
    private_dir,
    trust_problem,
)

OTHER_UID = 65534  # nobody

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def _file(tmp_path: Path, mode: int = 0o644) -> Path:
    path = tmp_path / "p.toml"
    path.write_text("x")
    path.chmod(mode)
    return path


@pytest.mark.parametrize(
    ("mode", "problem"),
    [
        pytest.param(0o644, None, id="0644"),
        pytest.param(0o600, None, id="0600"),
        pytest.param(0o664, "writable by its group", id="group-writable"),
        pytest.param(0o666, "writable by others", id="world-writable"),
    ],
)
def test_file_modes(tmp_path: Path, mode: int, problem: str | None) -> None:
    """Group or other write access is refused, naming the mode."""
    tmp_path.chmod(0o755)
    found = trust_problem(_file(tmp_path, mode))
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


def _stat(kind: int, mode: int, uid: int) -> os.stat_result:
    return os.stat_result((kind | mode, 1, 1, 1, uid, uid, 0, 0, 0, 0))


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
            _stat(stat.S_IFREG, 0o664, os.geteuid()), "writable by its group", id="group-write"
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
    """The one rule, on a stat result: root or us as owner, no group or other write except a
    root-owned sticky directory."""
    found = owner_mode_problem(info)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert problem in found


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


def _stat_of(mode: int, gid: int) -> os.stat_result:
    return os.stat_result((stat.S_IFREG | mode, 1, 1, 1, os.geteuid(), gid, 0, 0, 0, 0))


@pytest.mark.parametrize(
    ("mode", "gid", "code_gid", "problem"),
    [
        pytest.param(0o664, 1234, 1234, None, id="group-write-by-the-code's-group"),
        pytest.param(0o664, 1234, 4321, "writable by its group", id="another-group"),
        pytest.param(0o664, 1234, None, "writable by its group", id="code-not-group-writable"),
        pytest.param(0o666, 1234, 1234, "writable by others", id="others-never"),
        pytest.param(0o644, 1234, 1234, None, id="no-group-write"),
    ],
)
def test_shipped_files_follow_the_code(
    mode: int, gid: int, code_gid: int | None, problem: str | None
) -> None:
    """What ships with kernelpolicy may be writable by the group that can write its code
    (nobody new), never by others."""
    found = owner_mode_problem(_stat_of(mode, gid), code_gid)
    assert (found is None) if problem is None else (problem in (found or ""))


def _package(tmp_path: Path, directory: int, init: int) -> Path:
    package = tmp_path / "kernelpolicy"
    package.mkdir()
    (package / "__init__.py").write_text("")
    package.chmod(directory)
    (package / "__init__.py").chmod(init)
    return package


@pytest.mark.parametrize(
    ("directory", "init", "writable"),
    [
        pytest.param(0o775, 0o664, True, id="installed-under-umask-002"),
        pytest.param(0o755, 0o644, False, id="installed-under-umask-022"),
        pytest.param(0o775, 0o644, False, id="directory-only"),
        pytest.param(0o755, 0o664, False, id="init-only"),
    ],
)
def test_code_group(tmp_path: Path, directory: int, init: int, writable: bool) -> None:
    """The group that can write the code: the package directory and its __init__.py both."""
    package = _package(tmp_path, directory, init)
    expected = package.stat().st_gid if writable else None
    assert code_group(package) == expected


@needs_root
def test_code_group_needs_one_group(tmp_path: Path) -> None:
    """A directory and an __init__.py writable by two different groups: neither is the code's."""
    package = _package(tmp_path, 0o775, 0o664)
    os.chown(package / "__init__.py", -1, OTHER_UID)
    assert code_group(package) is None


def test_code_group_with_an_acl(tmp_path: Path) -> None:
    """A POSIX ACL on the package makes its group bits the ACL's mask (a named user may write
    it): no group is taken as the code's."""
    if shutil.which("setfacl") is None:
        pytest.skip("setfacl is not installed (Debian package acl)")
    package = _package(tmp_path, 0o775, 0o664)
    subprocess.run(["setfacl", "-m", f"u:{OTHER_UID}:rw", str(package / "__init__.py")], check=True)
    assert code_group(package) is None


# -- every directory above: whoever can write one can swap what is below it ------------------


def _nested(tmp_path: Path) -> tuple[Path, Path]:
    """tmp/top/mid/dir/p.toml, every level 0755: (top, the file)."""
    tmp_path.chmod(0o755)
    directory = tmp_path / "top" / "mid" / "dir"
    directory.mkdir(parents=True)
    for level in (tmp_path / "top", tmp_path / "top" / "mid", directory):
        level.chmod(0o755)
    return tmp_path / "top", _file(directory)


ROOT, USER = "root", "user"  # who owns the changed directory (root: as made when run as root)

ABOVE = {
    "all-0755": ("", 0o755, None, None),
    "grandparent-group-writable": ("mid", 0o775, "writable by its group", None),
    "great-grandparent-world-writable": ("", 0o777, "writable by others", None),
    "great-grandparent-sticky-of-root": ("", 0o1777, None, ROOT),  # like /tmp: none can rename
    "great-grandparent-sticky-of-another-user": ("", 0o1777, "writable by others", USER),
}


def _owned_by_the_user(directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``directory`` owned by the (non-root) user running kernelpolicy: as root, given to
    OTHER_UID, who is then taken for that user."""
    if os.geteuid() != 0:
        return  # made by us already
    import kernelpolicy.trust

    os.chown(directory, OTHER_UID, -1)
    monkeypatch.setattr(kernelpolicy.trust, "owner_ok", lambda uid: uid in (0, OTHER_UID))


@pytest.mark.parametrize(
    ("level", "mode", "problem", "owner"), list(ABOVE.values()), ids=list(ABOVE)
)
def test_every_directory_above_is_checked(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    level: str,
    mode: int,
    problem: str | None,
    owner: str | None,
) -> None:
    """A directory two or more levels up that others can write refuses the file (before,
    only the file and its own directory were checked), naming that directory; a sticky one
    passes only when root owns it."""
    top, path = _nested(tmp_path)
    if owner == ROOT and os.geteuid() != 0:
        pytest.skip("a directory of root's needs root")
    changed = top / level if level else top
    if owner == USER:
        _owned_by_the_user(changed, monkeypatch)
    changed.chmod(mode)
    found = trust_problem(path)
    if problem is None:
        assert found is None
        return
    assert found is not None
    assert found.startswith(f"{path}: a directory above it"), found
    assert f"{changed} is {problem}" in found
    assert ancestors_problem(path.parent) is not None


def test_every_failing_directory_above_is_named(tmp_path: Path) -> None:
    """A tree made under umask 002 fails at each level: one message names them all (before:
    the first only, so it was fixed one level at a time)."""
    top, path = _nested(tmp_path)
    for level in (top, top / "mid"):
        level.chmod(0o775)
    found = trust_problem(path) or ""
    assert f"{top} is writable by its group" in found
    assert f"{top / 'mid'} is writable by its group" in found


def test_a_directory_above_the_code_is_not_judged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whoever can write a directory above kernelpolicy's own code can replace the code that
    reads the file: such a directory refuses nothing (a /usr/local of 2775 root:staff)."""
    import kernelpolicy.trust

    top, path = _nested(tmp_path)
    top.chmod(0o2775)
    assert trust_problem(path) is not None
    monkeypatch.setattr(kernelpolicy.trust, "_code_ancestors", lambda: frozenset({top}))
    assert trust_problem(path) is None
    (top / "mid").chmod(0o775)  # not above the code: still refused
    assert f"{top / 'mid'} is writable by its group" in (trust_problem(path) or "")


@needs_root
def test_a_directory_above_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    """Another user's directory anywhere above: they can rename what is in it."""
    top, path = _nested(tmp_path)
    os.chown(top, OTHER_UID, OTHER_UID)
    found = trust_problem(path) or ""
    assert f"{top} is owned by uid {OTHER_UID}" in found, found


def test_a_cache_file_is_checked_again_on_what_was_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The path's check and the open are two steps; what was opened is checked again on its
    descriptor, so a file swapped in between (here: a path check that passed a group-writable
    file, as a swap right after it would) is a miss, not read."""
    import kernelpolicy.trust

    tmp_path.chmod(0o755)
    path = _file(tmp_path, 0o600)
    assert read_trusted_cache_bytes(path, limit=10, limit_name="LIMIT") == b"x"
    path.chmod(0o664)
    monkeypatch.setattr(kernelpolicy.trust, "trust_problem", lambda *_a, **_k: None)
    assert read_trusted_cache_bytes(path, limit=10, limit_name="LIMIT") is None


def test_one_pass_judges_each_directory_above_once_and_still_refuses(tmp_path: Path) -> None:
    """check_policy_paths shares what it judged between the files of one pass (``seen``): a
    failing directory above refuses every file, as without it."""
    top, path = _nested(tmp_path)
    sibling = path.with_name("q.toml")
    sibling.write_text("x")
    sibling.chmod(0o644)
    top.chmod(0o775)
    seen: dict[tuple[Path, bool], str | None] = {}
    first, second = trust_problem(path, seen=seen), trust_problem(sibling, seen=seen)
    assert first == trust_problem(path)
    assert second == trust_problem(sibling)
    assert (top, False) in seen
    assert seen[top, False] is not None
    assert f"{top} is writable by its group" in (second or "")


@pytest.mark.parametrize(
    ("make", "said"),
    [
        pytest.param(lambda d: (d / "p.toml").symlink_to("/nonexistent"), "cannot resolve",
                     id="dangling-link"),
        pytest.param(lambda d: ((d / "a").symlink_to(d / "p.toml"),
                                (d / "p.toml").symlink_to(d / "a")), "cannot resolve",
                     id="link-loop"),
    ],
)  # fmt: skip
def test_a_path_that_cannot_be_resolved_is_refused_with_why(
    tmp_path: Path, make: Callable[[Path], object], said: str
) -> None:
    """A dangling link or a loop of links is refused in one line, never a traceback."""
    tmp_path.chmod(0o755)
    make(tmp_path)
    found = trust_problem(tmp_path / "p.toml") or ""
    assert found.startswith(f"{tmp_path / 'p.toml'}: {said}"), found
    with pytest.raises(UntrustedFileError, match=said):
        check_trusted(tmp_path / "p.toml", "policy file")
