"""The Platform snapshot contract and its error messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelpolicy import Capability, PlatformFileError, load_platform

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
            r"schema: Input should be 'kernelpolicy\.platform/v1'",
            id="wrong-schema",
        ),
        pytest.param(
            json.dumps({**MINIMAL, "vendor": "intel"}),
            r"vendor: Input should be 'nvidia', 'amd' or 'none'",
            id="bad-vendor",
        ),
        pytest.param(
            json.dumps({"schema": "kernelpolicy.platform/v1"}),
            r"vendor: Field required",
            id="missing-vendor",
        ),
        pytest.param(
            json.dumps(
                {
                    **MINIMAL,
                    "devices": [{"index": 0, "name": "x", "arch": "sm_90", "capability": "nine"}],
                }
            ),
            r"devices\.0\.capability: Value error, capability must look like '9\.0', got 'nine'",
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
    with pytest.raises(PlatformFileError, match=r"nope\.json: cannot read platform file"):
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
