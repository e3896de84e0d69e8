"""Bounded reads and parses: every failure is the caller's error, every limit tested at the edge."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from kernelpolicy.errors import KernelPolicyError, SettingsError
from kernelpolicy.limits import MAX_NESTING_DEPTH, shown
from kernelpolicy.safeio import (
    dotted_key_parts,
    nesting_depth,
    parse_json,
    parse_toml,
    read_bytes_bounded,
    read_text_bounded,
    value_depth,
)

NOBODY = 65534


def _fail(message: str) -> KernelPolicyError:
    return SettingsError(message)


def test_read_regular_file_within_limit(tmp_path: Path) -> None:
    """A file of exactly the limit is read whole."""
    path = tmp_path / "a"
    path.write_bytes(b"x" * 10)
    assert read_bytes_bounded(path, limit=10, limit_name="L", fail=_fail) == b"x" * 10


def test_read_over_limit(tmp_path: Path) -> None:
    """One byte over the limit is an error naming the limit."""
    path = tmp_path / "a"
    path.write_bytes(b"x" * 11)
    with pytest.raises(SettingsError, match=r"11 bytes is over L \(10 bytes\)"):
        read_bytes_bounded(path, limit=10, limit_name="L", fail=_fail)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        pytest.param(os.mkfifo, "a FIFO", id="fifo"),
        pytest.param(lambda p: p.mkdir(), "directory", id="directory"),
        pytest.param(lambda p: None, "no such file", id="missing"),
    ],
)
def test_read_refuses_what_is_not_a_file(tmp_path: Path, make: object, expected: str) -> None:
    """A FIFO (which would hang a reader), a directory or a missing path is a clear error."""
    path = tmp_path / "thing"
    make(path)  # type: ignore[operator]
    with pytest.raises(SettingsError, match=expected):
        read_bytes_bounded(path, limit=100, limit_name="L", fail=_fail)


def test_read_dev_zero_is_refused() -> None:
    """/dev/zero is a device, not a file: refused before reading a byte."""
    with pytest.raises(SettingsError, match="character device"):
        read_bytes_bounded("/dev/zero", limit=100, limit_name="L", fail=_fail)


def test_read_invalid_utf8(tmp_path: Path) -> None:
    """Invalid UTF-8 names the offset."""
    path = tmp_path / "a"
    path.write_bytes(b"ok\xff")
    with pytest.raises(SettingsError, match="not UTF-8 \\(byte 2"):
        read_text_bounded(path, limit=100, limit_name="L", fail=_fail)


@pytest.mark.parametrize(
    ("text", "toml", "depth"),
    [
        pytest.param('{"a": [1, {"b": "[[[["}]}', False, 3, id="json-brackets-in-strings"),
        pytest.param('"\\"[" ', False, 0, id="json-escaped-quote"),
        pytest.param("a = [[1], {b = 2}]  # [[[[", True, 2, id="toml-comment"),
        pytest.param("a = '''[[[\n[[['''\n[t]\n", True, 1, id="toml-multiline-literal"),
        pytest.param('a = """[[\\"""[""" ', True, 0, id="toml-multiline-basic"),
        pytest.param("[" * 5, False, 5, id="unbalanced"),
    ],
)
def test_nesting_depth(text: str, toml: bool, depth: int) -> None:
    """Brackets inside strings and comments do not count."""
    assert nesting_depth(text, toml=toml) == depth


def test_json_depth_at_and_over_limit() -> None:
    """MAX_NESTING_DEPTH levels parse; one more is an error naming the constant."""
    at = "[" * MAX_NESTING_DEPTH + "]" * MAX_NESTING_DEPTH
    assert value_depth(parse_json(at, "x", _fail)) == MAX_NESTING_DEPTH
    over = "[" + at + "]"
    with pytest.raises(SettingsError, match="MAX_NESTING_DEPTH"):
        parse_json(over, "x", _fail)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("[" * 100_000, id="deep"),
        pytest.param("[NaN]", id="nan"),
        pytest.param("Infinity", id="infinity"),
        pytest.param("9" * 4301, id="huge-integer"),
        pytest.param("{", id="truncated"),
    ],
)
def test_json_errors_are_the_callers(text: str) -> None:
    """Deep, non-finite, oversized or broken JSON: only the caller's error comes out."""
    with pytest.raises(SettingsError):
        parse_json(text, "x", _fail)


def test_toml_dotted_keys_count_as_depth() -> None:
    """Dotted keys nest tables without brackets: the parsed depth is checked too."""
    ok = "a" + ".a" * (MAX_NESTING_DEPTH - 2) + " = 1"
    assert parse_toml(ok, "x", _fail)
    over = "a" + ".a" * MAX_NESTING_DEPTH + " = 1"
    with pytest.raises(SettingsError, match="MAX_NESTING_DEPTH"):
        parse_toml(over, "x", _fail)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("a = " + "[" * 5000 + "]" * 5000, id="deep-array"),
        pytest.param("a = " + "{b = " * 2000 + "1" + "}" * 2000, id="deep-inline-table"),
        pytest.param("a = " + "9" * 5000, id="huge-integer"),
    ],
)
def test_toml_errors_are_the_callers(text: str) -> None:
    """Deep or oversized TOML never reaches a RecursionError or ValueError."""
    with pytest.raises(SettingsError):
        parse_toml(text, "x", _fail)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("1", "1", id="short"),
        pytest.param("x" * 64, "x" * 64, id="at-limit"),
        pytest.param("x" * 65, "x" * 64 + "...(cut, 65 chars)", id="over-limit"),
    ],
)
def test_shown(value: str, expected: str) -> None:
    """Values are cut to SHOWN_ENV_VALUE_CHARS and marked."""
    assert shown(value) == expected


def _old_temp_name(path: Path) -> Path:
    """Where write_atomic wrote before renaming until the names were made unpredictable."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def _others(path: Path, *keep: Path) -> list[str]:
    """What is beside ``path`` but ``path`` and ``keep``: a temporary left behind."""
    return sorted(p.name for p in path.parent.iterdir() if p not in (path, *keep))


@pytest.mark.parametrize("mode", [pytest.param(0o600, id="0600"), pytest.param(0o644, id="0644")])
@pytest.mark.parametrize(
    "planted", [pytest.param("path", id="at-path"), pytest.param("tmp", id="at-old-temp-name")]
)
def test_write_atomic_follows_no_link(tmp_path: Path, mode: int, planted: str) -> None:
    """A link planted at the file or at the temporary name it once used is replaced or left,
    never written through; the file gets exactly ``mode`` and no temporary file is left."""
    from kernelpolicy.safeio import write_atomic

    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    path = tmp_path / "out.json"
    (path if planted == "path" else _old_temp_name(path)).symlink_to(victim)
    write_atomic(path, b"new", mode)
    assert victim.read_bytes() == b"keep"
    assert path.read_bytes() == b"new"
    assert not path.is_symlink()
    assert (path.stat().st_mode & 0o777) == mode
    assert _others(path, victim, _old_temp_name(path)) == []


def _a_directory(at: Path) -> None:
    at.mkdir()
    (at / "x").write_text("keeps rmdir off")


PLANTED = {
    "a-directory": _a_directory,
    "a-file": lambda at: at.write_text("theirs"),
    "a-fifo": lambda at: os.mkfifo(at, 0o666),
    "a-dangling-link": lambda at: at.symlink_to(at.with_name("nowhere")),
}


@pytest.mark.parametrize("plant", list(PLANTED.values()), ids=list(PLANTED))
def test_a_name_taken_beside_the_file_does_not_stop_the_write(
    tmp_path: Path, plant: Callable[[Path], object]
) -> None:
    """The temporary name is unpredictable, so what another user put beside the file ahead of
    time (nobody's, in a sticky /tmp) is left alone and the write goes through. Before, the name
    was ``.NAME.PID.tmp``: a directory there made every write fail (unlink: EISDIR), which
    stopped a daemon writing its --port-file in /tmp."""
    from kernelpolicy.safeio import write_atomic

    path = tmp_path / "kp.port"
    planted = _old_temp_name(path)
    plant(planted)
    if os.geteuid() == 0:
        os.lchown(planted, NOBODY, NOBODY)
    before = planted.lstat()
    info = write_atomic(path, b"127.0.0.1:1\n", 0o644)
    assert path.read_bytes() == b"127.0.0.1:1\n"
    assert (info.st_dev, info.st_ino) == (path.stat().st_dev, path.stat().st_ino)
    assert planted.lstat() == before
    assert _others(path, planted, tmp_path / "nowhere") == []


def test_a_failed_write_names_its_temporary_and_leaves_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error without a file name (a full disk at fsync) gets the temporary's, which is gone."""
    from kernelpolicy import safeio

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(safeio.os, "fsync", full)
    path = tmp_path / "out.json"
    with pytest.raises(OSError, match="No space left") as caught:
        safeio.write_atomic(path, b"new", 0o600)
    assert Path(caught.value.filename).name.startswith(".out.json.")
    assert list(tmp_path.iterdir()) == []


DOTTED = {
    "assignment": ("a.b.c = 1", 3),
    "a float is no key": ("x = 1.5", 1),
    "table header, then a key": ("[a.b]\nc.d.e = 2", 3),
    "array of tables": ("[[a.b.c.d]]", 4),
    "inline table keys": ("t = {a.b = 1, c.d.e = 2}", 3),
    "floats in a multi-line array": ("arr = [\n 1.5,\n 2.5,\n]\nq.r = 1", 2),
    "a quoted part with a dot": ('a."b.c".d = 1', 3),
    "a comment": ("# a.b.c.d\nx = 1", 1),
    "a string value": ("s = 'a.b.c.d'", 1),
    "an inline table in an array": ("a = [{b.c.d = 1}]", 3),
    "a multi-line string": ('a = """x.y.z\n.w"""\nb = 1', 1),
}


@pytest.mark.parametrize(("text", "parts"), list(DOTTED.values()), ids=list(DOTTED))
def test_dotted_key_parts(text: str, parts: int) -> None:
    assert dotted_key_parts(text) == parts


def test_a_long_dotted_key_is_refused_before_tomllib_sees_it() -> None:
    """tomllib builds a dotted key in time quadratic in its parts (40,000 parts: 45 s): a key of
    more than MAX_NESTING_DEPTH parts is refused by the pre-scan, which stops at the limit."""
    at = "a" + ".a" * (MAX_NESTING_DEPTH - 1) + " = 1"
    assert value_depth(parse_toml(at, "x", _fail)) == MAX_NESTING_DEPTH
    over = "a" + ".a" * 1_000_000 + " = 1"
    with pytest.raises(SettingsError, match=r"dotted key of more than .* MAX_NESTING_DEPTH"):
        parse_toml(over, "x", _fail)
