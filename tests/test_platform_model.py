"""The Platform snapshot contract and its error messages."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from kernelpolicy import Capability, PlatformFileError, load_platform
from kernelpolicy.limits import (
    MAX_ENV_VALUE_CHARS,
    MAX_NESTING_DEPTH,
    MAX_PLATFORM_FILE_BYTES,
    MAX_VERSION_CHARS,
    SHOWN_ENV_VALUE_CHARS,
)
from kernelpolicy.platform.model import Platform, load_platform_stream

MINIMAL = {"schema": "kernelpolicy.platform/v1", "vendor": "none"}


def test_minimal_snapshot_gets_defaults(tmp_path: Path) -> None:
    """Only schema and vendor are needed; the rest defaults to empty."""
    path = tmp_path / "p.json"
    path.write_text(json.dumps(MINIMAL))
    platform = load_platform(path)
    assert platform.devices == ()
    assert platform.to_dict()["schema"] == "kernelpolicy.platform/v1"


def test_extra_keys_are_kept(tmp_path: Path) -> None:
    """Unknown keys are allowed and survive a round trip."""
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**MINIMAL, "hostname": "node-17"}))
    assert load_platform(path).to_dict()["hostname"] == "node-17"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param("{", r"p\.json:1:2: not JSON", id="not-json"),
        pytest.param(
            json.dumps({**MINIMAL, "schema": "v0"}),
            r"schema: expected 'kernelpolicy\.platform/v1', got 'v0'",
            id="wrong-schema",
        ),
        pytest.param(
            json.dumps({**MINIMAL, "vendor": "intel"}),
            r"vendor: expected one of 'nvidia', 'amd', 'none', got 'intel'",
            id="bad-vendor",
        ),
        pytest.param(
            json.dumps({"schema": "kernelpolicy.platform/v1"}),
            r"vendor: required",
            id="missing-vendor",
        ),
        pytest.param(
            json.dumps(
                {
                    **MINIMAL,
                    "devices": [{"index": 0, "name": "x", "arch": "sm_90", "capability": "nine"}],
                }
            ),
            r"devices\.0\.capability: capability must look like '9\.0', got 'nine'",
            id="bad-capability",
        ),
    ],
)
def test_bad_files_name_file_and_key(content: str, message: str, tmp_path: Path) -> None:
    """A bad snapshot raises PlatformFileError naming the file, the key and the expectation."""
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(PlatformFileError, match=message) as info:
        load_platform(path)
    assert str(path) in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    """A missing file says so, with its path."""
    with pytest.raises(PlatformFileError, match=r"nope\.json: no such file"):
        load_platform(tmp_path / "nope.json")


@pytest.mark.parametrize(
    ("lower", "higher"),
    [
        pytest.param("8.0", "9.0", id="major"),
        pytest.param("8.6", "8.9", id="minor"),
        pytest.param("9.0", "10.0", id="two-digit"),
    ],
)
def test_capability_orders_numerically(lower: str, higher: str) -> None:
    """Capabilities compare as numbers: 10.0 is above 9.0."""
    assert Capability.parse(lower) < Capability.parse(higher)


def _nested(depth: int) -> str:
    """A snapshot whose extra key nests ``depth`` levels in all (the top object is level 1)."""
    return json.dumps(MINIMAL)[:-1] + ', "x": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


def _padded(size: int) -> bytes:
    """A valid snapshot of exactly ``size`` bytes (spaces after the object are JSON too)."""
    body = json.dumps(MINIMAL).encode()
    return body + b" " * (size - len(body))


def _version(length: int) -> bytes:
    return json.dumps({**MINIMAL, "driver": {"version": "1" * length}}).encode()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(b'{"vendor": "\xff"}', r"not UTF-8 \(byte 12", id="invalid-utf8"),
        pytest.param(
            _nested(MAX_NESTING_DEPTH + 1).encode(),
            rf"nested more than {MAX_NESTING_DEPTH} levels deep, over MAX_NESTING_DEPTH",
            id="depth-limit-plus-one",
        ),
        pytest.param(b"[" * 100_000, r"over MAX_NESTING_DEPTH", id="deep-100k"),
        pytest.param(
            _padded(MAX_PLATFORM_FILE_BYTES + 1),
            rf"{MAX_PLATFORM_FILE_BYTES + 1} bytes is over MAX_PLATFORM_FILE_BYTES",
            id="size-limit-plus-one",
        ),
        pytest.param(
            _version(MAX_VERSION_CHARS + 1),
            rf"driver\.version: .*{MAX_VERSION_CHARS + 1} characters is over MAX_VERSION_CHARS",
            id="version-limit-plus-one",
        ),
        pytest.param(
            _version(4301), r"4301 characters is over MAX_VERSION_CHARS", id="4301-digits"
        ),
        pytest.param(
            (json.dumps(MINIMAL)[:-1] + ', "n": ' + "7" * 4301 + "}").encode(),
            r"not acceptable JSON .*4301 digits",
            id="4301-digit-integer",
        ),
        pytest.param(
            (json.dumps(MINIMAL)[:-1] + ', "n": NaN}').encode(),
            r"NaN is not a JSON number",
            id="nan",
        ),
        pytest.param(
            (json.dumps(MINIMAL)[:-1] + ', "n": -Infinity}').encode(),
            r"-Infinity is not a JSON number",
            id="infinity",
        ),
        pytest.param(
            json.dumps({**MINIMAL, "libraries": {"torch": "2" * 5000}}).encode(),
            r"libraries\.torch: .*over MAX_VERSION_CHARS",
            id="library-version",
        ),
        pytest.param(
            json.dumps(
                {
                    **MINIMAL,
                    "devices": [
                        {"index": 0, "name": "x", "arch": "a", "capability": "9" * 5000 + ".0"}
                    ],
                }
            ).encode(),
            r"capability must look like '9\.0', got '9{64}\.\.\.\(cut, 5002 chars\)'",
            id="huge-capability-cut",
        ),
    ],
)
def test_hostile_files_are_platform_file_errors(
    content: bytes, message: str, tmp_path: Path
) -> None:
    """Every way a file can be wrong is one PlatformFileError naming the file and the problem."""
    path = tmp_path / "p.json"
    path.write_bytes(content)
    with pytest.raises(PlatformFileError, match=message) as info:
        load_platform(path)
    assert str(info.value).startswith(str(path))
    assert len(str(info.value)) < 2000


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(_nested(MAX_NESTING_DEPTH).encode(), id="depth-at-limit"),
        pytest.param(_padded(MAX_PLATFORM_FILE_BYTES), id="size-at-limit"),
        pytest.param(_version(MAX_VERSION_CHARS), id="version-at-limit"),
    ],
)
def test_files_at_each_limit_load(content: bytes, tmp_path: Path) -> None:
    """A file exactly at each limit is accepted."""
    path = tmp_path / "p.json"
    path.write_bytes(content)
    assert load_platform(path).vendor == "none"


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        pytest.param("fifo", r"not a regular file \(a FIFO\)", id="fifo-never-blocks"),
        pytest.param(
            "dev-zero", r"/dev/zero: not a regular file \(a character device\)", id="dev-zero"
        ),
        pytest.param("directory", r"not a regular file \(a directory\)", id="directory"),
    ],
)
def test_non_regular_files_are_refused(kind: str, message: str, tmp_path: Path) -> None:
    """A FIFO with no writer, /dev/zero or a directory is refused before anything is read."""
    path: Path = tmp_path / "p.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path = Path("/dev/zero")
    else:
        path.mkdir()
    with pytest.raises(PlatformFileError, match=message):
        load_platform(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(json.dumps(MINIMAL).encode(), None, id="valid"),
        pytest.param(
            _padded(MAX_PLATFORM_FILE_BYTES + 1),
            r"<stdin>: .*over MAX_PLATFORM_FILE_BYTES",
            id="too-large",
        ),
        pytest.param(b"\xfe\xff", r"<stdin>: not UTF-8", id="not-utf8"),
        pytest.param(b"[" * 5000, r"<stdin>: nested .* over MAX_NESTING_DEPTH", id="deep"),
    ],
)
def test_stream_is_bounded_like_a_file(content: bytes, message: str | None) -> None:
    """``--platform -`` reads at most MAX_PLATFORM_FILE_BYTES + 1 bytes and checks them the same."""
    stream = io.BytesIO(content + b" " * 100)  # what follows the limit is never read
    if message is None:
        assert load_platform_stream(stream).vendor == "none"
        return
    with pytest.raises(PlatformFileError, match=message):
        load_platform_stream(stream)


@pytest.mark.parametrize(
    ("data", "where"),
    [
        pytest.param(None, r"\(top level\): expected a JSON object, got None", id="null"),
        pytest.param([MINIMAL], r"\(top level\)", id="list"),
        pytest.param("kernelpolicy.platform/v1", r"\(top level\)", id="string"),
        pytest.param({**MINIMAL, "vendor": 3}, r"vendor:", id="vendor-int"),
        pytest.param(
            {**MINIMAL, "devices": {"0": {}}},
            r"devices: expected a list of devices",
            id="devices-object",
        ),
        pytest.param({**MINIMAL, "devices": [None]}, r"devices\.0:", id="device-null"),
        pytest.param(
            {**MINIMAL, "devices": [{"index": -1, "name": 1, "arch": [], "capability": {}}]},
            r"devices\.0\.index: .*\n.*devices\.0\.name",
            id="device-fields",
        ),
        pytest.param(
            {
                **MINIMAL,
                "devices": [
                    {"index": 0, "name": "x", "arch": "a", "capability": "9.0", "memory_mib": -5}
                ],
            },
            r"devices\.0\.memory_mib: expected an integer >= 0, got -5",
            id="negative-memory",
        ),
        pytest.param({**MINIMAL, "driver": "580"}, r"driver:", id="driver-string"),
        pytest.param({**MINIMAL, "torch": {"version": 2.1}}, r"torch\.version:", id="torch-float"),
        pytest.param({**MINIMAL, "libraries": ["torch"]}, r"libraries:", id="libraries-list"),
        pytest.param({**MINIMAL, "env": {"A": 1}}, r"env\.A:", id="env-int"),
        pytest.param({**MINIMAL, "probe_errors": "x"}, r"probe_errors:", id="probe-errors-string"),
        pytest.param(
            {**MINIMAL, "devices": [{"index": "x" * 100_000}] * 50},
            r"\.\.\. and \d+ more",
            id="many-errors-counted",
        ),
    ],
)
def test_from_dict_on_any_json_value(data: object, where: str) -> None:
    """Wrong types anywhere give one PlatformFileError naming the keys, never another exception."""
    with pytest.raises(PlatformFileError, match=where) as info:
        Platform.from_dict(data, source="snap")
    assert len(str(info.value)) < 8000


def test_from_dict_refuses_deep_values() -> None:
    """A deep Python value (not only text) is refused before pydantic walks it."""
    deep: object = "leaf"
    for _ in range(10_000):
        deep = [deep]
    with pytest.raises(PlatformFileError, match=r"over MAX_NESTING_DEPTH"):
        Platform.from_dict({**MINIMAL, "x": deep}, source="snap")


@pytest.mark.parametrize(
    ("value", "carried"),
    [
        pytest.param(" 1 ", "1", id="spaces-dropped"),
        pytest.param("x" * SHOWN_ENV_VALUE_CHARS, "x" * SHOWN_ENV_VALUE_CHARS, id="shown-at-limit"),
        pytest.param(
            "x" * (SHOWN_ENV_VALUE_CHARS + 1),
            "x" * SHOWN_ENV_VALUE_CHARS + f"...(cut, {SHOWN_ENV_VALUE_CHARS + 1} chars)",
            id="shown-limit-plus-one",
        ),
        pytest.param(
            "s" * MAX_ENV_VALUE_CHARS,
            "s" * SHOWN_ENV_VALUE_CHARS + f"...(cut, {MAX_ENV_VALUE_CHARS} chars)",
            id="max-at-limit",
        ),
        pytest.param(
            "s" * (MAX_ENV_VALUE_CHARS + 1),
            f"<not carried: {MAX_ENV_VALUE_CHARS + 1} chars, over MAX_ENV_VALUE_CHARS "
            f"({MAX_ENV_VALUE_CHARS})>",
            id="max-limit-plus-one",
        ),
    ],
)
def test_snapshot_env_values_are_carried_cut(value: str, carried: str) -> None:
    """Whoever wrote the snapshot, its env values are cut on load, and stay the same on reload."""
    platform = Platform.from_dict({**MINIMAL, "env": {"V": value}})
    assert platform.env == {"V": carried}
    assert Platform.from_dict(platform.to_dict()).env == {"V": carried}


def test_path_with_nul_is_a_platform_file_error() -> None:
    """A path no file can have (a NUL character) is refused like a missing file."""
    with pytest.raises(PlatformFileError, match=r"not a usable path"):
        load_platform("snap\0.json")
