"""The node's halts file as a worker reads it (``kernelpolicy.server.halts_file``): the
daemon's own file is taken; anything another user could have written or swapped, anything too
large, not a file, or not the daemon's format, is ignored and says why."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from kernelpolicy.limits import MAX_HALTS_FILE_BYTES
from kernelpolicy.server.halts_file import read_halts, write_halts
from kernelpolicy.server.sockets import halts_file_path
from tests.helpers import (
    plant_foreign_owner,
    plant_group_writable,
    plant_open_ancestor,
    plant_symlink,
)

HALTS = {"sampler.greedy/aiter": "its output guard repaired 2 output(s) in this node's workers"}
VALID = json.dumps({"format": 1, "halts": HALTS})


def _text(text: str) -> Callable[[Path], None]:
    return lambda path: path.write_text(text)


def _planted(plant: Callable[[Path], None]) -> Callable[[Path], None]:
    """The daemon's own file, then made untrustworthy as ``plant`` (tests.helpers) does."""

    def make(path: Path) -> None:
        path.write_text(VALID)
        plant(path)

    return make


def _fifo(path: Path) -> None:
    os.mkfifo(path, 0o600)


@dataclass(frozen=True)
class Case:
    make: Callable[[Path], None]
    halts: dict[str, str]
    problem: str = ""  # a fragment of why the file is ignored ("" : taken)


CASES = {
    "the-daemons-file": Case(_text(VALID), HALTS),
    "no-halts": Case(_text('{"format": 1, "halts": {}}'), {}),
    "another-users-file": Case(_planted(plant_foreign_owner), {}, "owned by uid 65534"),
    "group-writable": Case(_planted(plant_group_writable), {}, "writable by its group"),
    "a-link": Case(_planted(plant_symlink), {}, "a symbolic link"),
    "a-fifo-never-blocks": Case(_fifo, {}, "not a regular file"),
    "a-directory-above-open-to-all": Case(_planted(plant_open_ancestor), {}, "writable by others"),
    "too-large": Case(_text(" " * (MAX_HALTS_FILE_BYTES + 1)), {}, "MAX_HALTS_FILE_BYTES"),
    "not-json": Case(_text("{halts"), {}, "not JSON"),
    "not-utf8": Case(lambda p: p.write_bytes(b'{"format": 1, "halts": {"\xff": 1}}'), {}, "UTF-8"),
    "another-format": Case(_text('{"format": 2, "halts": {}}'), {}, "with format 1"),
    "halts-not-an-object": Case(_text('{"format": 1, "halts": []}'), {}, '"halts", an object'),
    "a-key-without-impl": Case(
        _text('{"format": 1, "halts": {"sampler.greedy": "x"}}'), {}, "a feature/impl key"
    ),
    "a-reason-not-text": Case(_text('{"format": 1, "halts": {"a/b": 3}}'), {}, "a feature/impl"),
    "a-reason-too-long": Case(
        _text(json.dumps({"format": 1, "halts": {"a/b": "x" * 601}})), {}, "at most 600"
    ),
    "too-deep": Case(_text('{"format": 1, "halts": {"a/b": [[["x"]]]}}'), {}, "nested"),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_worker_takes_only_the_daemons_own_file(tmp_path: Path, case: Case) -> None:
    directory = tmp_path / "run"
    directory.mkdir(mode=0o700)
    path = directory / "kp.halts.json"
    case.make(path)
    found = read_halts(path)
    assert found.halts == case.halts
    if case.problem:
        assert found.problem is not None
        assert case.problem in found.problem, found.problem
        assert found.problem.startswith("the node's halts file is ignored: ")
    else:
        assert found.problem is None
    assert found.stamp is not None


def test_no_file_is_no_halts(tmp_path: Path) -> None:
    found = read_halts(tmp_path / "kp.halts.json")
    assert (found.halts, found.problem, found.stamp) == ({}, None, None)


def test_what_the_daemon_writes_is_read_back(tmp_path: Path) -> None:
    """Beside the socket, mode 0644, a new file each time (a reader sees the change)."""
    path = halts_file_path(tmp_path / "kp.sock")
    assert path == tmp_path / "kp.halts.json"
    write_halts(path, {})
    empty = read_halts(path)
    write_halts(path, HALTS)
    found = read_halts(path)
    assert (empty.halts, found.halts, found.problem) == ({}, HALTS, None)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert found.stamp != empty.stamp


def _planted_by_another_user(tmp_path: Path) -> str:
    """A halts file another user wrote where this node's daemon socket would be: its address."""
    directory = tmp_path / "run"
    directory.mkdir(mode=0o700)
    _planted(plant_foreign_owner)(directory / "kp.halts.json")
    return f"unix:{directory}/kp.sock"


def test_resolve_ignores_a_planted_file_and_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A halt another user wrote would take a kernel out of this worker: ignored, said."""
    from kernelpolicy.api import resolve
    from tests.helpers import fixture

    address = _planted_by_another_user(tmp_path)
    env = {"KERNELPOLICY_SOCKET": address, "KERNELPOLICY_LOG_FORMAT": "json"}
    with caplog.at_level("WARNING", logger="kernelpolicy"):
        resolution = resolve(fixture("mi355x"), env=env | {"SGLANG_USE_AITER": "1"},
                             node_halts=True)  # fmt: skip
    assert resolution.decision("sampler.greedy").impl == "aiter"  # the planted halt: no effect
    assert "kernelpolicy.halts.ignored" in caplog.text
    assert "owned by uid 65534" in caplog.text


def test_the_cli_on_this_node_says_it_ignored_the_file(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.helpers import ROOT

    address = _planted_by_another_user(tmp_path)
    shown = subprocess.run(
        [sys.executable, "-m", "kernelpolicy", "explain", "sampler.greedy"], cwd=ROOT,
        env=os.environ | {"KERNELPOLICY_SOCKET": address}, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert shown.stderr.startswith("kernelpolicy: warning: the node's halts file is ignored: ")
    assert "owned by uid 65534" in shown.stderr
