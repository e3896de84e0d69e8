"""Platform strings (versions, names) refuse control characters at load (issue 24, finding 1):
a snapshot travels between machines, and its strings end up in comments, labels and shell
output, where a newline would start a line of its own."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernelpolicy import PlatformFileError
from kernelpolicy.encoding import control_character
from kernelpolicy.platform.envvars import capture_env
from kernelpolicy.platform.libraries import read_libraries
from kernelpolicy.platform.model import Platform

DEVICE = {"index": 0, "name": "NVIDIA H100", "arch": "sm_90", "capability": "9.0"}
BASE: dict[str, Any] = {"schema": "kernelpolicy.platform/v1", "vendor": "nvidia"}


def snapshot(part: str, key: str, text: str) -> dict[str, Any]:
    """A snapshot with ``text`` at ``part.key`` (a device's field for ``devices``)."""
    if part == "devices":
        return {**BASE, "devices": [{**DEVICE, key: text}]}
    return {**BASE, part: {key: text}}


PLACES = [
    pytest.param("libraries", "vllm", "libraries.vllm", id="library-version"),
    pytest.param("driver", "version", "driver.version", id="driver-version"),
    pytest.param("driver", "cuda", "driver.cuda", id="driver-cuda"),
    pytest.param("torch", "version", "torch.version", id="torch-version"),
    pytest.param("devices", "name", "devices.0.name", id="device-name"),
    pytest.param("devices", "arch", "devices.0.arch", id="device-arch"),
    pytest.param("devices", "pci_device_id", "devices.0.pci_device_id", id="pci-id"),
]


@pytest.mark.parametrize(("part", "key", "where"), PLACES)
@pytest.mark.parametrize(
    ("text", "char"),
    [
        pytest.param("0.12.0\ntouch /tmp/X\n#", "U+000A", id="newline"),
        pytest.param("0.12.0\r", "U+000D", id="cr"),
        pytest.param("0.12\x00", "U+0000", id="nul"),
        pytest.param("0.12\x1b[2J", "U+001B", id="escape"),
        pytest.param("0.12\x85", "U+0085", id="next-line"),
        pytest.param("0.12\u2028x", "U+2028", id="line-separator"),
        pytest.param("\u202e21.0", "U+202E", id="bidi-override"),
        pytest.param("0.12\udcff", "U+DCFF", id="not-utf8"),
    ],
)
def test_control_characters_are_refused_naming_the_key(
    part: str, key: str, where: str, text: str, char: str
) -> None:
    """One PlatformFileError naming the key and the character; its message stays printable."""
    with pytest.raises(PlatformFileError) as info:
        Platform.from_dict(snapshot(part, key, text), source="node.json")
    message = str(info.value)
    assert f"{where}: holds the control character {char}" in message
    assert all(line.isprintable() for line in message.splitlines())
    assert len(message.splitlines()) == 2


@pytest.mark.parametrize(
    ("part", "key"),
    [
        pytest.param("libraries", "vllm\n", id="library-name"),
        pytest.param("env", "KERNELPOLICY_FORCE_X\n", id="env-name"),
    ],
)
def test_names_with_control_characters_are_refused(part: str, key: str) -> None:
    """A library or variable name with a newline is refused; the message shows it escaped."""
    with pytest.raises(PlatformFileError, match=r"the name holds the control character U\+000A"):
        Platform.from_dict(snapshot(part, key, "1"), source="node.json")


@pytest.mark.parametrize(
    ("part", "key", "text"),
    [
        pytest.param("devices", "name", "Radeon\u2122 Pro \u00e9 \u4e2d", id="unicode-name"),
        pytest.param("libraries", "vllm", "0.12.0+g1a2b.d20250101", id="local-version"),
        pytest.param("env", "VLLM_X", "a\nb", id="env-value-newline"),
        pytest.param("driver", "version", "580.159.04 ", id="trailing-space"),
    ],
)
def test_printable_text_and_env_values_load(part: str, key: str, text: str) -> None:
    """The other side: printable Unicode loads; an env value is a value (its encoder quotes
    it), not a platform string."""
    Platform.from_dict(snapshot(part, key, text))


@settings(max_examples=200, derandomize=True, deadline=None)
@given(text=st.text(max_size=12))
def test_a_version_loads_exactly_when_it_has_no_control_character(text: str) -> None:
    """Any string: loaded unchanged, or refused because of a control character."""
    data = snapshot("libraries", "vllm", text)
    if control_character(text) is None:
        assert Platform.from_dict(data).libraries == {"vllm": text}
    else:
        with pytest.raises(PlatformFileError, match=r"libraries\.vllm"):
            Platform.from_dict(data)


def test_probe_drops_one_bad_version_not_the_others() -> None:
    """Broken metadata with a newline is reported; the other libraries are kept."""
    versions = {"vllm": "0.12.0\nx", "torch": "2.11.0"}
    report = read_libraries(versions, versions.get)
    assert report.versions == {"torch": "2.11.0"}
    assert "library vllm: broken package metadata" in report.errors[0]


def test_probe_leaves_out_a_variable_name_with_a_newline() -> None:
    """``KERNELPOLICY_FORCE_*`` matches ``..._X\\n`` too; such a name is no switch."""
    env = {"KERNELPOLICY_FORCE_X\n": "a", "KERNELPOLICY_FORCE_Y": "b"}
    assert capture_env(env, ["KERNELPOLICY_FORCE_*"]) == {"KERNELPOLICY_FORCE_Y": "b"}
