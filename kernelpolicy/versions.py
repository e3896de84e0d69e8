"""Version strings of the GPU stack, made comparable.

Python distributions use PEP 440 (``0.1.7.post2.dev18``, ``2.11.0+cu130``, ``2.5.0a0+git1234``);
drivers and toolkits do not (``550.54.15``, ``9.1.0.70``, ``6.3.1-48``, ``12.04``,
``6.3.42131-fa1d09cbd``). :func:`parse_version` reads both into one :class:`StackVersion`
backed by :class:`packaging.version.Version`, so that PEP 440 specifiers work on every kind.

A string that cannot be read becomes an :class:`UnreadableVersion` value, never ``None`` and
never a silent "no match": callers must handle it explicitly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from kernelpolicy.errors import VersionError
from kernelpolicy.limits import MAX_VERSION_CHARS, shown

if TYPE_CHECKING:
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

__all__ = [
    "KERNELPOLICY_VERSION",
    "LazySpecifierSet",
    "StackVersion",
    "UnreadableVersion",
    "cuda_version_from_int",
    "parse_specifier",
    "parse_version",
    "require_version",
    "version_admitted",
]

KERNELPOLICY_VERSION = "0.1.0"
"""kernelpolicy's own version (``kernelpolicy.__version__``): in the core layer so that the
layers above (the compiled-pack cache key, metrics, labels) read it without importing the
package's front door."""

# A dotted numeric release with an optional build tag: 550.54.15, 6.3.1-48, 6.3.42131-fa1d09cbd,
# 12.04, v1.2. The build tag becomes a PEP 440 local label, so it orders after the bare release.
_DOTTED = re.compile(
    r"v?(?P<release>\d+(?:\.\d+)*)(?:[-_+~](?P<build>[0-9A-Za-z][0-9A-Za-z._-]*))?"
)
_LOCAL_UNSAFE = re.compile(r"[^0-9A-Za-z]+")
# What most of the GPU stack's versions and the policies' ranges look like (550.54.15,
# 2.11.0+cu130, 0.7.2.post1; >=0.1.13,<0.2): answered without packaging, whose import and
# regular expressions are 6-8 ms of a GPU worker's first resolve(); see :func:`version_admitted`.
_SIMPLE_VERSION = re.compile(r"(\d+(?:\.\d+)*)(?:\.post(\d+))?(?:\+[a-z0-9]+(?:\.[a-z0-9]+)*)?")
_SIMPLE_CLAUSE = re.compile(r"\s*(==|!=|<=|>=|<|>)\s*(\d+(?:\.\d+)*)\s*")


@dataclass(frozen=True, order=False)
class StackVersion:
    """A readable version string and the PEP 440 value it compares as.

    Attributes:
        raw: The string as found.
        value: The comparable value. PEP 440 reads most strings itself (``12.04`` is 12.4,
            ``6.3.1-48`` a post release 48, ordering after 6.3.1); a dotted string PEP 440
            rejects keeps its build tag as a local label (``6.3.42131-fa1d09cbd``).
        scheme: ``"pep440"`` when packaging read the string as it is, else ``"dotted"``.
    """

    raw: str
    value: Version = field(compare=False)
    scheme: str = field(compare=False)

    @property
    def base(self) -> Version:
        """The release alone: ``0.1.16.post3.dev0+g1a2b`` -> ``0.1.16``."""
        from packaging.version import Version

        return Version(self.value.base_version)

    @property
    def release(self) -> tuple[int, ...]:
        return self.value.release

    def major_minor(self) -> str:
        """``"12.4"`` for ``12.4.131``; a one-part release gets ``.0``."""
        rel = (*self.value.release, 0)
        return f"{rel[0]}.{rel[1]}"

    def __lt__(self, other: StackVersion) -> bool:
        return self.value < other.value

    def __le__(self, other: StackVersion) -> bool:
        return self.value <= other.value

    def __gt__(self, other: StackVersion) -> bool:
        return self.value > other.value

    def __ge__(self, other: StackVersion) -> bool:
        return self.value >= other.value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StackVersion):
            return NotImplemented
        return self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __str__(self) -> str:
        return self.raw


@dataclass(frozen=True)
class UnreadableVersion:
    """A version string no known format could read. Falsy, so ``if v:`` rejects it."""

    raw: str
    reason: str

    def __bool__(self) -> bool:
        return False

    def __str__(self) -> str:
        return f"unreadable version {shown(self.raw)!r} ({self.reason})"


def parse_version(raw: str) -> StackVersion | UnreadableVersion:
    """Read a version string of any format the GPU stack uses.

    Never raises: a string longer than ``MAX_VERSION_CHARS`` is refused before any parser sees
    it (a 4,301-digit release part would overflow ``int()``), and so is anything not a ``str``.

    Args:
        raw: A version as a library, driver or toolkit reports it.

    Returns:
        A :class:`StackVersion`, or an :class:`UnreadableVersion` that says why not.
    """
    if not isinstance(raw, str):
        return UnreadableVersion(shown(repr(raw)), f"expected a string, got {type(raw).__name__}")
    if len(raw) > MAX_VERSION_CHARS:
        # Checked before the cache, which would otherwise keep the long string alive.
        return UnreadableVersion(
            shown(raw), f"{len(raw)} characters is over MAX_VERSION_CHARS ({MAX_VERSION_CHARS})"
        )
    return _parse_version(raw)


@lru_cache(maxsize=1024)
def _parse_version(raw: str) -> StackVersion | UnreadableVersion:
    # Imported here: a worker on a machine without a GPU compares no version on its first
    # resolve(), and packaging.version is about 3 ms of its start.
    from packaging.version import InvalidVersion, Version

    text = raw.strip()
    if not text:
        return UnreadableVersion(raw, "empty string")
    try:
        return StackVersion(text, Version(text), "pep440")
    except InvalidVersion:
        pass
    except ValueError as exc:  # pragma: no cover - MAX_VERSION_CHARS keeps int() in range
        return UnreadableVersion(raw, f"not a usable number ({exc})")
    match = _DOTTED.fullmatch(text)
    if match is None:
        return UnreadableVersion(
            raw, "expected PEP 440 (2.11.0+cu130) or dotted numbers (550.54.15, 6.3.1-48)"
        )
    release = ".".join(str(int(part)) for part in match["release"].split("."))
    build = match["build"]
    canonical = (
        release if build is None else f"{release}+{_LOCAL_UNSAFE.sub('.', build).strip('.')}"
    )
    try:
        return StackVersion(text, Version(canonical), "dotted")
    except InvalidVersion:  # pragma: no cover - the regex admits only what Version accepts
        return UnreadableVersion(raw, "dotted version with an unusable build tag")


def require_version(raw: str) -> StackVersion:
    """Like :func:`parse_version`, but raise :class:`VersionError` for an unreadable string."""
    parsed = parse_version(raw)
    if isinstance(parsed, UnreadableVersion):
        raise VersionError(str(parsed))
    return parsed


@lru_cache(maxsize=256)
def parse_specifier(text: str) -> SpecifierSet:
    """Read a PEP 440 specifier set (``">=0.1.13,<0.2"``), raising :class:`VersionError`."""
    # Imported here: packaging.specifiers brings packaging.tags (platform, subprocess,
    # sysconfig), about 10 ms that a worker whose ranges are never checked need not pay.
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        specifiers = SpecifierSet(text)
    except InvalidSpecifier as exc:
        raise VersionError(
            f"invalid version specifier {shown(text)!r}: "
            "expected PEP 440 such as '>=0.1.13' or '>=8.0,<=12.1'"
        ) from exc
    for spec in specifiers:
        # Each clause's version is compared as numbers later; bound it like any version string.
        if len(spec.version) > MAX_VERSION_CHARS:
            raise VersionError(
                f"invalid version specifier {shown(text)!r}: a version of {len(spec.version)} "
                f"characters is over MAX_VERSION_CHARS ({MAX_VERSION_CHARS})"
            )
    return specifiers


def version_admitted(
    raw: str, specifier: LazySpecifierSet, *, base: bool = False
) -> bool | UnreadableVersion:
    """Whether the version string ``raw`` is in ``specifier``, prereleases admitted (with
    ``base``, its release alone is compared: ``0.1.16.post3+g1a2b`` as ``0.1.16``), or why
    ``raw`` cannot be read.

    A plain release, with at most a ``.postN`` and a local label, against clauses that compare
    with a plain release (``>=``, ``<=``, ``>``, ``<``, ``==``, ``!=``) is answered by PEP 440's
    rules directly; anything else goes through :mod:`packaging`, as it always did.
    """
    simple = _simple_admitted(raw, specifier.text, base)
    if simple is not None:
        return simple
    parsed = parse_version(raw)
    if isinstance(parsed, UnreadableVersion):
        return parsed
    return specifier.contains(parsed.base if base else parsed.value, prereleases=True)


def _simple_admitted(raw: str, text: str, base: bool) -> bool | None:
    """PEP 440's answer for a simple version and simple clauses, None for anything else.

    With the release compared without trailing zeros and ``post`` the post-release number:
    ``>=`` admits every release at or above (its post-releases too), ``<=`` one below, or the
    same without a post-release; ``>`` and ``<`` admit only another release (a post-release or
    local label of the same one is excluded, as packaging's ``Specifier`` does); ``==`` the same
    release without a post-release (a local label is ignored); ``!=`` the rest.
    """
    if not isinstance(raw, str) or len(raw) > MAX_VERSION_CHARS:
        return None
    version = _SIMPLE_VERSION.fullmatch(raw.strip())
    clauses = _simple_clauses(text)
    if version is None or clauses is None:
        return None
    release = _release(version[1])
    post = None if base or version[2] is None else int(version[2])
    for operator, bound in clauses:
        if operator == ">=":
            admitted = release >= bound
        elif operator == "<=":
            admitted = release < bound or (release == bound and post is None)
        elif operator == ">":
            admitted = release > bound
        elif operator == "<":
            admitted = release < bound
        else:
            equal = release == bound and post is None
            admitted = equal if operator == "==" else not equal
        if not admitted:
            return False
    return True


@lru_cache(maxsize=256)
def _simple_clauses(text: str) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
    if len(text) > MAX_VERSION_CHARS * 4:
        return None
    clauses = []
    for part in text.split(",") if text.strip() else ():
        match = _SIMPLE_CLAUSE.fullmatch(part)
        if match is None:
            return None
        clauses.append((match[1], _release(match[2])))
    return tuple(clauses)


def _release(text: str) -> tuple[int, ...]:
    """``1.10.0`` -> ``(1, 10)``: PEP 440 compares releases without their trailing zeros."""
    parts = [int(part) for part in text.split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def cuda_version_from_int(value: int) -> str:
    """Turn the CUDA driver API's integer into ``major.minor``: ``12040`` -> ``"12.4"``."""
    if value <= 0:
        raise VersionError(f"CUDA version integer must be positive, got {value}")
    return f"{value // 1000}.{(value % 1000) // 10}"


class LazySpecifierSet:
    """A specifier set that policies validated when they were loaded, parsed on first use.

    Compiled policies hold these: a range is parsed (and ``packaging.specifiers`` imported)
    only when a check needs it; on a machine without a GPU most never are. Behaves as the
    ``SpecifierSet`` it stands for in everything kernelpolicy uses: ``contains``, ``str``,
    equality.
    """

    __slots__ = ("_parsed", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._parsed: SpecifierSet | None = None

    @property
    def parsed(self) -> SpecifierSet:
        """The set (see :func:`parse_specifier`, which raises :class:`VersionError`)."""
        if self._parsed is None:
            self._parsed = parse_specifier(self.text)
        return self._parsed

    def contains(self, item: Any, prereleases: bool | None = None) -> bool:
        return self.parsed.contains(item, prereleases=prereleases)

    def __str__(self) -> str:
        return str(self.parsed)

    def __repr__(self) -> str:
        return f"LazySpecifierSet({self.text!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazySpecifierSet):
            return self.text == other.text or self.parsed == other.parsed
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.parsed)
