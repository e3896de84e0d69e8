"""What a candidate's conditions may say: library ranges, switches, known issues, workarounds.

The leaves of the policy language (see :mod:`kernelpolicy.policy.schema`) and the field checks
that the feature, candidate and bridge-rule models share: names, PEP 440 ranges, architectures.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kernelpolicy.errors import VersionError
from kernelpolicy.versions import parse_specifier

Vendor = Literal["nvidia", "amd"]
SwitchState = Literal["auto", "on", "off", "ignore"]

# Whole names: \Z, never $ (which also matches before a final newline, so "mine\n" would pass
# a .match()); callers use .fullmatch(), and the \Z keeps a .match() elsewhere exact too.
IDENT = re.compile(r"[a-z][a-z0-9_]*\Z")
ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*\Z")
DISTRIBUTION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
_ARCH = re.compile(r"(sm_[0-9]+[a-z]?|gfx[0-9]+[0-9a-f]{2})\Z")


class Strict(BaseModel):
    """The base of every policy model: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def check_specifier(value: str | None) -> str | None:
    """A PEP 440 range (or ``*``, any version), unchanged; a bad one is a ``ValueError``."""
    if value is None or value.strip() == "*":
        return value
    try:
        parse_specifier(value)
    except VersionError as exc:
        raise ValueError(str(exc)) from None
    return value


def check_arch_list(value: list[str] | None) -> list[str] | None:
    """Architecture names as the probe writes them (``sm_90``, ``gfx942``)."""
    for arch in value or ():
        if not _ARCH.fullmatch(arch):
            raise ValueError(f"arch {arch!r}: expected sm_90 style or gfx942 style")
    return value


class LibraryRequirement(Strict):
    """A distribution that must be installed, optionally in a version range.

    ``compare = "base"`` compares the release only, so ``0.1.16.post3.dev0+g1a2b`` counts as
    0.1.16 (PEP 440 would otherwise exclude dev releases from ``>=0.1.13``).
    """

    version: str = "*"
    compare: Literal["full", "base"] = "full"

    _check = field_validator("version")(lambda cls, v: check_specifier(v))


LibrarySpec = str | LibraryRequirement


def check_libraries(value: dict[str, LibrarySpec]) -> dict[str, LibrarySpec]:
    """Distribution names, each with a valid range (a plain string) or a requirement."""
    for name, spec in value.items():
        if not DISTRIBUTION.fullmatch(name):
            raise ValueError(f"library {name!r} is not a distribution name")
        if isinstance(spec, str):
            try:
                check_specifier(spec)
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
    return value


class Switch(Strict):
    """An environment variable that turns a candidate on, off, or leaves it to the policy.

    Each of the variable's three conditions maps to a state: ``auto`` (use where supported, else
    fall back with a warning), ``on`` (required: unsupported is an error), ``off`` (never), or
    ``ignore`` (no opinion). ``SGLANG_DISABLE_AITER_GREEDY_SAMPLE`` has the inverted sense:
    ``true = "off"``, ``false = "ignore"``, ``unset = "ignore"``.
    """

    env: str
    unset: SwitchState = "auto"
    true: SwitchState = "on"
    false: SwitchState = "off"
    note: str | None = None
    aliases: list[str] = Field(default_factory=list, max_length=8)
    """Other variables that say the same (another engine's name for the switch, such as
    SGLang's ``SGLANG_USE_AITER`` beside ``VLLM_ROCM_USE_AITER``): the first of ``env`` and
    these that is set (and not blank) is the one read."""

    @field_validator("env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        if not ENV_NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not an environment variable name (A-Z, 0-9, _)")
        return value

    @field_validator("aliases")
    @classmethod
    def _alias_names(cls, values: list[str]) -> list[str]:
        for value in values:
            cls._env_name(value)
        return values


class KnownIssue(Strict):
    """A known bug of a candidate, with what to do about it.

    ``action = "disable"`` rejects the candidate where ``library`` is in ``versions`` (or always,
    without a library); ``guard`` keeps it but asks for an output guard (``guard`` names it);
    ``note`` only records it for ``explain``.
    """

    reason: str
    reference: str | None = None
    library: str | None = None
    versions: str | None = None
    compare: Literal["full", "base"] = "full"
    action: Literal["disable", "guard", "note"] = "disable"
    guard: str | None = None
    fix: str | None = None

    _check = field_validator("versions")(lambda cls, v: check_specifier(v))

    @model_validator(mode="after")
    def _consistent(self) -> KnownIssue:
        if (self.library is None) != (self.versions is None):
            raise ValueError("'library' and 'versions' go together: name both or neither")
        if self.action == "guard" and not self.guard:
            raise ValueError("action 'guard' needs 'guard', the name of the output guard")
        return self


class LiftCondition(Strict):
    """When a workaround may be lifted, as checks on the platform (all must hold)."""

    libraries: dict[str, LibrarySpec] = Field(default_factory=dict, min_length=1)

    _check = field_validator("libraries")(lambda cls, v: check_libraries(v))


class Workaround(Strict):
    """A candidate disabled until a fix lands.

    ``until`` says in words when it may be lifted; ``lift_when``, once known, in checks.
    """

    reason: str
    reference: str | None = None
    until: str
    lift_when: LiftCondition | None = None
