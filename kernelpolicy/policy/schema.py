"""The policy language: what a ``policies/*.toml`` file may say, validated with pydantic.

Every key is known (unknown keys are errors), every version range is a PEP 440 specifier checked
at load time, and every CEL expression is compiled and type-checked against the variables its
feature declares. Evaluation later only evaluates.
"""

from __future__ import annotations

import keyword
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kernelpolicy.errors import VersionError
from kernelpolicy.limits import MAX_BATCH_ROUTES, MAX_ENGINE_RULE_WORDS, MAX_ENV_VALUE_CHARS
from kernelpolicy.policy.record import candidate_unconditional
from kernelpolicy.policy.schema_routes import (
    BatchRoute,
    ContextType,
    check_routes,
    dtype_names,
)
from kernelpolicy.versions import parse_specifier

POLICY_SCHEMA = "kernelpolicy.policy/v1"
Vendor = Literal["nvidia", "amd"]
SwitchState = Literal["auto", "on", "off", "ignore"]

_IDENT = re.compile(r"^[a-z][a-z0-9_]*$")
_FEATURE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$")
_ENV = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_ARCH = re.compile(r"^(sm_\d+[a-z]?|gfx\d+[0-9a-f]{2})$")
_ENTRY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_FLAG = re.compile(r"^--[A-Za-z0-9][A-Za-z0-9_.-]*(=.*)?$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _specifier(value: str | None) -> str | None:
    if value is None or value.strip() == "*":
        return value
    try:
        parse_specifier(value)
    except VersionError as exc:
        raise ValueError(str(exc)) from None
    return value


def _arch_list(value: list[str] | None) -> list[str] | None:
    """Architecture names as the probe writes them (``sm_90``, ``gfx942``)."""
    for arch in value or ():
        if not _ARCH.match(arch):
            raise ValueError(f"arch {arch!r}: expected sm_90 style or gfx942 style")
    return value


class LibraryRequirement(_Strict):
    """A distribution that must be installed, optionally in a version range.

    ``compare = "base"`` compares the release only, so ``0.1.16.post3.dev0+g1a2b`` counts as
    0.1.16 (PEP 440 would otherwise exclude dev releases from ``>=0.1.13``).
    """

    version: str = "*"
    compare: Literal["full", "base"] = "full"

    _check = field_validator("version")(lambda cls, v: _specifier(v))


LibrarySpec = str | LibraryRequirement


def _libraries(value: dict[str, LibrarySpec]) -> dict[str, LibrarySpec]:
    for name, spec in value.items():
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", name):
            raise ValueError(f"library {name!r} is not a distribution name")
        if isinstance(spec, str):
            try:
                _specifier(spec)
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
    return value


class Switch(_Strict):
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

    @field_validator("env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        if not _ENV.match(value):
            raise ValueError(f"{value!r} is not an environment variable name (A-Z, 0-9, _)")
        return value


class KnownIssue(_Strict):
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

    _check = field_validator("versions")(lambda cls, v: _specifier(v))

    @model_validator(mode="after")
    def _consistent(self) -> KnownIssue:
        if (self.library is None) != (self.versions is None):
            raise ValueError("'library' and 'versions' go together: name both or neither")
        if self.action == "guard" and not self.guard:
            raise ValueError("action 'guard' needs 'guard', the name of the output guard")
        return self


class LiftCondition(_Strict):
    """When a workaround may be lifted, as checks on the platform (all must hold)."""

    libraries: dict[str, LibrarySpec] = Field(default_factory=dict, min_length=1)

    _check = field_validator("libraries")(lambda cls, v: _libraries(v))


class Workaround(_Strict):
    """A candidate disabled until a fix lands.

    ``until`` says in words when it may be lifted; ``lift_when``, once known, in checks.
    """

    reason: str
    reference: str | None = None
    until: str
    lift_when: LiftCondition | None = None


def _plain_text(what: str, value: str) -> str:
    if any(ch in value for ch in "\0\n\r"):
        raise ValueError(f"{what} {value[:40]!r}: newlines and NUL bytes are not allowed")
    if len(value) > MAX_ENV_VALUE_CHARS:
        raise ValueError(f"{what}: longer than MAX_ENV_VALUE_CHARS ({MAX_ENV_VALUE_CHARS})")
    return value


class EngineRule(_Strict):
    """How one inference engine is told to run an implementation, under conditions.

    An engine's rules are tried in order; the first whose conditions all hold applies. The
    conditions: ``versions`` (a PEP 440 range on the engine's installed distribution, such as
    ``vllm``), ``vendor``, ``arch`` (the primary device), ``libraries`` (as for candidates) and
    ``if_on`` (environment switches that must be true). What it tells the engine: ``env``
    (variable -> value, in the form the engine's own parser accepts) and ``flags`` (words
    appended to its command line). ``inexpressible`` says, instead or as well, that the engine
    cannot be made to run exactly this, and what the operator gives up; ``shared_switch`` names
    the one variable that would express it only by also turning other kernels off, so that the
    bridge can list them.
    """

    versions: str | None = None
    vendor: Vendor | None = None
    arch: list[str] | None = None
    libraries: dict[str, LibrarySpec] = Field(default_factory=dict)
    if_on: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    flags: list[str] = Field(default_factory=list, max_length=MAX_ENGINE_RULE_WORDS)
    inexpressible: str | None = None
    shared_switch: str | None = None
    reference: str | None = None

    _versions = field_validator("versions")(lambda cls, v: _specifier(v))
    _libs = field_validator("libraries")(lambda cls, v: _libraries(v))

    @field_validator("arch")
    @classmethod
    def _arch_names(cls, value: list[str] | None) -> list[str] | None:
        return _arch_list(value)

    @field_validator("if_on")
    @classmethod
    def _switch_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _ENV.match(name):
                raise ValueError(f"{name!r} is not an environment variable name (A-Z, 0-9, _)")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_ENGINE_RULE_WORDS:
            raise ValueError(f"more than MAX_ENGINE_RULE_WORDS ({MAX_ENGINE_RULE_WORDS}) variables")
        for name, text in value.items():
            if not _ENV.match(name):
                raise ValueError(f"{name!r} is not an environment variable name (A-Z, 0-9, _)")
            _plain_text(f"value of {name}", text)
        return value

    @field_validator("flags")
    @classmethod
    def _flags(cls, value: list[str]) -> list[str]:
        for word in value:
            _plain_text("flag", word)
        if value and not _FLAG.match(value[0]):
            raise ValueError(
                f"flags start with an option such as '--attention-backend', not {value[0]!r}"
            )
        for word in value:
            if word.startswith("--") and not _FLAG.match(word):
                raise ValueError(f"flag {word!r}: expected --name or --name=value")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> EngineRule:
        if self.shared_switch is not None:
            if not _ENV.match(self.shared_switch):
                raise ValueError(f"shared_switch {self.shared_switch!r} is not a variable name")
            if self.inexpressible is None:
                raise ValueError("'shared_switch' explains an 'inexpressible' rule: add one")
        return self


def _engines(value: dict[str, list[EngineRule]]) -> dict[str, list[EngineRule]]:
    for engine in value:
        if not _IDENT.match(engine):
            raise ValueError(f"engine {engine!r}: expected lower_snake_case such as 'vllm'")
    return value


class Candidate(_Strict):
    """One implementation of a feature and everything that must hold for it to be chosen."""

    impl: str
    vendor: Vendor | None = None
    arch: list[str] | None = None
    exclude_arch: list[str] = Field(default_factory=list)
    capability: str | None = None
    min_compute_units: int | None = Field(default=None, ge=1)
    driver: str | None = None
    cuda: str | None = None
    rocm: str | None = None
    torch: str | None = None
    libraries: dict[str, LibrarySpec] = Field(default_factory=dict)
    switches: list[Switch] = Field(default_factory=list)
    when: str | None = None
    known_issues: list[KnownIssue] = Field(default_factory=list)
    workarounds: list[Workaround] = Field(default_factory=list)
    entry: str | None = None
    verified: bool = False
    reference: str | None = None
    notes: str | None = None
    engines: dict[str, list[EngineRule]] = Field(default_factory=dict)

    _engine_names = field_validator("engines")(lambda cls, v: _engines(v))
    _specs = field_validator("capability", "driver", "cuda", "rocm", "torch")(
        lambda cls, v: _specifier(v)
    )
    _libs = field_validator("libraries")(lambda cls, v: _libraries(v))

    @field_validator("impl")
    @classmethod
    def _impl_name(cls, value: str) -> str:
        if not _IDENT.match(value):
            raise ValueError(f"implementation name {value!r}: expected lower_snake_case")
        return value

    @field_validator("arch", "exclude_arch")
    @classmethod
    def _arch_names(cls, value: list[str] | None) -> list[str] | None:
        return _arch_list(value)

    @field_validator("entry")
    @classmethod
    def _entry_point(cls, value: str | None) -> str | None:
        if value is not None and not _ENTRY.match(value):
            raise ValueError(f"entry {value!r}: expected 'package.module:function'")
        return value

    @property
    def unconditional(self) -> bool:
        """True when nothing about the platform, environment or call can reject it."""
        return candidate_unconditional(self)


class Requirement(_Strict):
    """The feature must not silently fall back (on ``vendor``, or everywhere)."""

    vendor: Vendor | None = None
    hint: str


class Feature(_Strict):
    """A kernel choice: candidates in order of preference and what happens when none fits.

    ``by_batch`` and ``dtypes`` choose per call: by the call's ``batch`` (measured winners per
    batch range) and by its ``dtype`` (an implementation whose stored ``kernelpolicy verify``
    evidence does not pass a dtype does not serve it).
    """

    description: str
    context: dict[str, ContextType] = Field(default_factory=dict)
    candidates: list[Candidate] = Field(min_length=1)
    fallback: str | None = None
    required: Requirement | None = None
    # Engine-only decisions (an attention backend, a MoE GEMM path): kernelpolicy decides and
    # tells the engine, but ships no in-process implementation for them.
    in_process: bool = True
    # Settings that only matter for one kind of model (an MLA backend); the bridge tells the
    # engine only when asked for that kind (``--model-kind mla``).
    model_kind: Literal["mha", "mla"] | None = None
    engines: dict[str, list[EngineRule]] = Field(default_factory=dict)
    by_batch: list[BatchRoute] = Field(default_factory=list)
    dtypes: list[str] = Field(default_factory=list)

    _engine_names = field_validator("engines")(lambda cls, v: _engines(v))

    @field_validator("by_batch", mode="before")
    @classmethod
    def _row_count(cls, value: object) -> object:
        # Counted before each row is validated: a million rows cost a length check only.
        if isinstance(value, list) and len(value) > MAX_BATCH_ROUTES:
            raise ValueError(f"{len(value)} rows is over MAX_BATCH_ROUTES ({MAX_BATCH_ROUTES})")
        return value

    _dtypes = field_validator("dtypes")(lambda cls, v: dtype_names(v))

    @model_validator(mode="after")
    def _consistent(self) -> Feature:
        names = [c.impl for c in self.candidates]
        check_routes(self, names)
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"implementation {duplicates[0]!r} listed twice")
        if self.fallback is None and self.required is None:
            raise ValueError(
                "a feature needs 'fallback' (an always-available implementation) or 'required'"
            )
        if self.fallback is not None:
            if self.fallback not in names:
                raise ValueError(f"fallback {self.fallback!r} is not one of the candidates {names}")
            fallback = self.candidates[names.index(self.fallback)]
            if not fallback.unconditional:
                raise ValueError(
                    f"fallback {self.fallback!r} has requirements; a fallback must always be "
                    "available, so give it none"
                )
        _check_context(self.context)
        return self


def _check_context(context: dict[str, ContextType]) -> None:
    from kernelpolicy.policy.cel import STATIC_VARIABLES

    for variable in context:
        if not _IDENT.match(variable) or keyword.iskeyword(variable):
            raise ValueError(
                f"context variable {variable!r}: expected a lower_snake_case name that is not a "
                "Python keyword"
            )
        if variable in STATIC_VARIABLES:
            raise ValueError(
                f"context variable {variable!r} shadows the platform variable of that name"
            )


class GateRequires(_Strict):
    feature: str
    impl: str


class Gate(_Strict):
    """A call-time boolean, written as the kernel's real rule in CEL."""

    description: str
    context: dict[str, ContextType] = Field(default_factory=dict)
    rule: str
    requires: GateRequires | None = None
    reference: str | None = None

    @model_validator(mode="after")
    def _context_names(self) -> Gate:
        _check_context(self.context)
        return self


class Disable(_Strict):
    """An operator's switch-off: never choose ``impl`` for ``feature``, with the reason why."""

    feature: str
    impl: str
    reason: str
    reference: str | None = None


class PolicyFile(_Strict):
    """One TOML file of a policy set."""

    schema_id: Literal["kernelpolicy.policy/v1"] = Field(alias="schema")
    features: dict[str, Feature] = Field(default_factory=dict)
    gates: dict[str, Gate] = Field(default_factory=dict)
    disable: list[Disable] = Field(default_factory=list)

    @field_validator("features", "gates")
    @classmethod
    def _names(cls, value: dict[str, object]) -> dict[str, object]:
        for name in value:
            if not _FEATURE.match(name):
                raise ValueError(
                    f"name {name!r}: expected dotted lower_snake_case (sampler.greedy)"
                )
        return value
