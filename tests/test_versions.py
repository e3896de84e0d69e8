"""kernelpolicy.versions: one reader for every version format of the GPU stack."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from packaging.specifiers import SpecifierSet

from kernelpolicy.errors import VersionError
from kernelpolicy.limits import MAX_VERSION_CHARS
from kernelpolicy.versions import (
    LazySpecifierSet,
    StackVersion,
    UnreadableVersion,
    cuda_version_from_int,
    parse_specifier,
    parse_version,
    require_version,
    version_admitted,
)


@pytest.mark.parametrize(
    ("raw", "scheme", "canonical"),
    [
        pytest.param("0.1.7.post2.dev18", "pep440", "0.1.7.post2.dev18", id="aiter-dev-post"),
        pytest.param("2.11.0+cu130", "pep440", "2.11.0+cu130", id="torch-local-cuda"),
        pytest.param("2.5.0a0+git1234", "pep440", "2.5.0a0+git1234", id="torch-nightly-git"),
        pytest.param("550.54.15", "pep440", "550.54.15", id="nvidia-driver"),
        pytest.param("9.1.0.70", "pep440", "9.1.0.70", id="cudnn-four-part"),
        pytest.param("6.3.1-48", "pep440", "6.3.1.post48", id="rocm-build-number"),
        pytest.param("12.04", "pep440", "12.4", id="leading-zero-minor"),
        pytest.param("6.3.42131-fa1d09cbd", "dotted", "6.3.42131+fa1d09cbd", id="hip-git-hash"),
        pytest.param("v1.2", "pep440", "1.2", id="v-prefix"),
        pytest.param(" 580.159.04\n", "pep440", "580.159.4", id="whitespace-from-sysfs"),
    ],
)
def test_readable_versions(raw: str, scheme: str, canonical: str) -> None:
    """Every format the stack uses is read, and compares by its canonical value."""
    parsed = parse_version(raw)
    assert isinstance(parsed, StackVersion)
    assert parsed.scheme == scheme
    assert str(parsed.value) == canonical


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param("", id="empty"),
        pytest.param("   ", id="blank"),
        pytest.param("N/A", id="not-available"),
        pytest.param("1.2.3-", id="dangling-dash"),
        pytest.param("latest", id="word"),
        pytest.param("1..2", id="empty-part"),
    ],
)
def test_unreadable_versions_are_explicit_values(raw: str) -> None:
    """An unreadable string is a falsy UnreadableVersion that says why, never None."""
    parsed = parse_version(raw)
    assert isinstance(parsed, UnreadableVersion)
    assert not parsed
    assert repr(raw) in str(parsed)
    with pytest.raises(VersionError, match="unreadable version"):
        require_version(raw)


@pytest.mark.parametrize(
    ("lower", "higher"),
    [
        pytest.param("550.54.15", "550.127.05", id="driver-numeric-not-lexical"),
        pytest.param("0.1.12", "0.1.13", id="aiter-fix-release"),
        pytest.param("0.1.7.post2.dev18", "0.1.7.post2", id="dev-before-post"),
        pytest.param("6.3.1", "6.3.1-48", id="build-after-release"),
        pytest.param("2.5.0a0+git1234", "2.5.0", id="alpha-before-final"),
        pytest.param("12.4", "12.10", id="cuda-minor-numeric"),
    ],
)
def test_ordering(lower: str, higher: str) -> None:
    """Versions order numerically and by PEP 440 phase."""
    low, high = require_version(lower), require_version(higher)
    assert low < high
    assert high > low
    assert low != high


def test_base_drops_pre_post_dev_and_local() -> None:
    """The base of 0.1.16.post3.dev0+g1a2b is 0.1.16, for policies that compare base versions."""
    assert str(require_version("0.1.16.post3.dev0+g1a2b").base) == "0.1.16"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(12040, "12.4", id="cuda-12.4"),
        pytest.param(13000, "13.0", id="cuda-13.0"),
        pytest.param(11080, "11.8", id="cuda-11.8"),
        pytest.param(12090, "12.9", id="cuda-12.9"),
    ],
)
def test_cuda_version_from_int(value: int, expected: str) -> None:
    """NVML's integer CUDA version becomes major.minor."""
    assert cuda_version_from_int(value) == expected


def test_cuda_version_from_int_rejects_zero() -> None:
    """Zero is what a missing driver reports; it is an error, not CUDA 0.0."""
    with pytest.raises(VersionError, match="positive"):
        cuda_version_from_int(0)


def test_specifier_errors_name_the_text() -> None:
    """A bad specifier is an error that quotes it and shows the expected form."""
    with pytest.raises(VersionError, match=r"'=>0\.1'.*>=0\.1\.13"):
        parse_specifier("=>0.1")
    assert parse_specifier(">=8.0,<=12.1").contains("9.0")


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        pytest.param(
            "1" * (MAX_VERSION_CHARS + 1),
            rf"{MAX_VERSION_CHARS + 1} characters is over MAX_VERSION_CHARS",
            id="limit-plus-one",
        ),
        pytest.param("1" * 4301, r"4301 characters is over MAX_VERSION_CHARS", id="4301-digits"),
        pytest.param("1" * 4301 + "-rc", r"over MAX_VERSION_CHARS", id="4301-digits-dotted"),
        pytest.param("9" * 10**6, r"1000000 characters", id="a-megabyte"),
    ],
)
def test_overlong_versions_are_unreadable_not_errors(raw: str, reason: str) -> None:
    """A version over MAX_VERSION_CHARS is an UnreadableVersion that says why, never ValueError;
    its text is cut, so printing it is safe."""
    parsed = parse_version(raw)
    assert isinstance(parsed, UnreadableVersion)
    assert re.search(reason, parsed.reason)
    assert len(str(parsed)) < 200
    with pytest.raises(VersionError, match=reason):
        require_version(raw)


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param("1" * MAX_VERSION_CHARS, id="digits-at-limit"),
        pytest.param("1." * (MAX_VERSION_CHARS // 2 - 1) + "10", id="parts-at-limit"),
    ],
)
def test_versions_at_the_limit_are_read(raw: str) -> None:
    """A version of exactly MAX_VERSION_CHARS characters is still read."""
    assert len(raw) == MAX_VERSION_CHARS
    assert isinstance(parse_version(raw), StackVersion)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="none"),
        pytest.param(12.4, id="float"),
        pytest.param(b"1.0", id="bytes"),
    ],
)
def test_non_strings_are_unreadable(value: object) -> None:
    """parse_version never raises, even on a value that is not a string."""
    assert isinstance(parse_version(value), UnreadableVersion)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        pytest.param("<" + "1" * MAX_VERSION_CHARS, True, id="at-limit"),
        pytest.param(">=" + "1" * (MAX_VERSION_CHARS + 1), False, id="limit-plus-one"),
        pytest.param("<" + "1" * 4301, False, id="4301-digits"),
    ],
)
def test_specifier_versions_are_bounded(text: str, ok: bool) -> None:
    """A specifier's version is bounded like any version, so matching can never overflow."""
    if ok:
        assert parse_specifier(text).contains("1.0")
        return
    with pytest.raises(VersionError, match=r"over MAX_VERSION_CHARS"):
        parse_specifier(text)


# version_admitted: the answer without packaging for simple versions and clauses is PEP 440's,
# as packaging gives it, for every pair of this grid (and packaging answers the rest).
GRID_VERSIONS = [
    "0", "1", "1.0", "1.0.0", "1.0.1", "0.9", "0.9.9", "1.1", "2", "10.0", "1.10",
    "1.0.post1", "1.0.post0", "0.9.post3", "1.0+cu130", "1.0.post2+local.7", "1.0.1+x",
    "2.11.0+cu130", "0.7.2.post1", "580.159.04", "0.1.13", "0.1.12", "0.1.16.post3",
    " 1.0 ",
    # not simple: packaging (or the dotted reader) answers
    "1.0rc1", "1.0.dev3", "1.0a1.post2", "v1.0", "6.3.1-48", "6.3.42131-fa1d09cbd", "1!2.0",
    "1.0.POST1", "1.0-1", "not a version", "",
]  # fmt: skip
GRID_SPECIFIERS = [
    "", ">=1.0", ">=1", ">=1.0.0", "<=1.0", "<1.0", ">1.0", "==1.0", "==1", "!=1.0",
    ">= 0.1.13", ">=0.1.13,<0.2", ">=1.0,!=1.0.1", ">0.9,<=1.0", "<2,>0.9.9",
    ">=580.65", "==2.11", ">0.7.2", "<=0.7.2", ">=0.7.2.post1",
    # not simple
    "~=1.0", "==1.*", "===1.0", ">=1.0rc1", "==1.0+cu130", ">1.0.post0",
]  # fmt: skip


def _packaging_admits(raw: str, text: str, base: bool) -> bool | None:
    parsed = parse_version(raw)
    if isinstance(parsed, UnreadableVersion):
        return None
    value = parsed.base if base else parsed.value
    return SpecifierSet(text).contains(value, prereleases=True)


@pytest.mark.parametrize("base", [False, True], ids=["full", "base"])
@pytest.mark.parametrize("text", GRID_SPECIFIERS)
def test_version_admitted_is_pep_440s_answer(text: str, base: bool) -> None:
    specifier = LazySpecifierSet(text)
    for raw in GRID_VERSIONS:
        answer = version_admitted(raw, specifier, base=base)
        expected = _packaging_admits(raw, text, base)
        if expected is None:
            assert isinstance(answer, UnreadableVersion), raw
        else:
            assert answer is expected, (raw, text, base)


@pytest.mark.parametrize(
    ("raw", "text", "simple"),
    [
        ("2.11.0+cu130", ">=2.4", True),
        ("0.7.2.post1", ">=0.7,<0.8", True),
        ("580.159.04", ">=550", True),
        ("1.0rc1", ">=0.9", False),
        ("1.0", "~=1.0", False),
        ("1.0", "==1.*", False),
        ("6.3.1-48", ">=6", False),
    ],
)  # fmt: skip
def test_simple_versions_and_ranges_import_no_packaging(raw: str, text: str, simple: bool) -> None:
    """The point of the fast path: a worker whose versions and ranges are simple never imports
    packaging (checked in a fresh interpreter)."""
    code = (
        "import sys; from kernelpolicy.versions import LazySpecifierSet, version_admitted; "
        f"version_admitted({raw!r}, LazySpecifierSet({text!r})); "
        "print('packaging' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout.strip()
    assert out == str(not simple)
