"""labels --write DIR (and serve --labels-dir) that cannot write: the error says what is wrong
with DIR and what was expected, where the bare strerror misled ("No such file or directory"
for /proc, which exists)."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from kernelpolicy import labels
from kernelpolicy.cli import main
from kernelpolicy.labels import LabelError, write_feature_file
from kernelpolicy.platform.fixtures import fixture_dir

FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
EXPECTED_DIRECTORY = (
    f"expected an existing directory this user can write, NFD's features.d ({FEATURES_DIR})"
)


def _missing(tmp_path: Path) -> Path:
    return tmp_path / "no" / "such"


def _a_file(tmp_path: Path) -> Path:
    (tmp_path / "file").write_text("x")
    return tmp_path / "file"


def _directory_in_the_way(tmp_path: Path) -> Path:
    (tmp_path / "kernelpolicy").mkdir()
    return tmp_path


PLACES = [
    pytest.param(_missing, "/no/such does not exist; " + EXPECTED_DIRECTORY, id="missing"),
    pytest.param(_a_file, "/file is not a directory; " + EXPECTED_DIRECTORY, id="a-file"),
    pytest.param(_directory_in_the_way, "/kernelpolicy is a directory; expected a file of "
                 "kernelpolicy's there, or none", id="directory-at-the-name"),
]  # fmt: skip


@pytest.mark.parametrize(("place", "said"), PLACES)
def test_a_directory_that_is_not_one_is_named(
    tmp_path: Path, place: Callable[[Path], Path], said: str
) -> None:
    """Each error names the file, what is wrong with the directory, and what was expected."""
    directory = place(tmp_path)
    with pytest.raises(LabelError) as raised:
        write_feature_file(directory, "a=1\n")
    message = str(raised.value)
    assert message.startswith(f"cannot write the feature file {directory / 'kernelpolicy'}: ")
    assert message.endswith(said)


ERRNOS = [
    pytest.param(errno.ENOENT, None, "takes no new files (No such file or directory: a kernel "
                 "file system, /proc or /sys?)", id="enoent-from-an-existing-directory"),
    pytest.param(errno.EACCES, 0, "takes no new files (Permission denied: a kernel file "
                 "system, /proc or /sys?)", id="eacces-to-root"),
    pytest.param(errno.EACCES, 1000, "uid 1000 cannot create a file in", id="eacces-to-a-user"),
    pytest.param(errno.EROFS, None, "is on a read-only file system", id="erofs"),
]  # fmt: skip


@pytest.mark.parametrize(("code", "uid", "said"), ERRNOS)
def test_an_existing_directory_that_refuses_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, uid: int | None, said: str
) -> None:
    """A directory that exists yet takes no file says so, with the system's words and what
    was expected; never that the directory is missing."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(labels, "write_atomic", refuse)
    if uid is not None:
        monkeypatch.setattr(os, "geteuid", lambda: uid)
    with pytest.raises(LabelError) as raised:
        write_feature_file(tmp_path, "a=1\n")
    message = str(raised.value)
    assert said in message
    assert message.endswith(EXPECTED_DIRECTORY)
    assert FEATURES_DIR in message


def test_a_full_disk_keeps_the_systems_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure that is no fault of the directory (ENOSPC) is said as the system says it."""

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(labels, "write_atomic", full)
    with pytest.raises(LabelError) as raised:
        write_feature_file(tmp_path, "a=1\n")
    target = tmp_path / "kernelpolicy"
    assert str(raised.value) == f"cannot write the feature file {target}: No space left on device"


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="no /proc here")
def test_labels_write_to_proc_says_it_takes_no_files(capsys: pytest.CaptureFixture[str]) -> None:
    """The reported case: --write /proc said "No such file or directory" of a directory that
    exists; it now says /proc takes no new files, and what to give instead (exit 2)."""
    snapshot = str(fixture_dir() / "platforms/mi300x.json")
    assert main(["labels", "--platform", snapshot, "--write", "/proc"]) == 2
    err = capsys.readouterr().err
    assert "/proc takes no new files" in err
    assert EXPECTED_DIRECTORY in err
