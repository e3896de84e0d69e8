"""The policy document: a file, its features, their candidates, gates and disables.

Part of the policy language (:mod:`kernelpolicy.policy.schema`); the leaves of a candidate's
conditions are in :mod:`.conditions`, the bridge's rules in :mod:`.bridge` and the per-call
routing keys in :mod:`.routes`.
"""

from __future__ import annotations

import keyword
import math
import re
from typing import Literal, get_args

from pydantic import Field, field_validator, model_validator

from kernelpolicy.limits import MAX_BATCH_ROUTES, MAX_HALT_THRESHOLD
from kernelpolicy.policy.record import candidate_unconditional
from kernelpolicy.policy.schema.bridge import EngineRule, check_engines
from kernelpolicy.policy.schema.conditions import (
    IDENT,
    KnownIssue,
    LibrarySpec,
    Strict,
    Switch,
    Vendor,
    Workaround,
    check_arch_list,
    check_libraries,
    check_specifier,
)
from kernelpolicy.policy.schema.routes import (
    BatchRoute,
    ContextType,
    check_routes,
    dtype_names,
)

__all__ = [
    "POLICY_SCHEMA",
    "Candidate",
    "Disable",
    "Feature",
    "Gate",
    "GateRequires",
    "HaltOn",
    "PolicyFile",
    "Requirement",
    "Rollout",
]

POLICY_SCHEMA = "kernelpolicy.policy/v1"

_FEATURE = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*\Z")
_SALT = re.compile(r"[A-Za-z0-9._-]{0,64}\Z")

# The kinds of model a feature may be for, and ``--model-kind`` takes: ``mla`` is dense MLA
# (DeepSeek V2/V3/R1, Kimi K2), ``mla-sparse`` MLA with a sparse indexer (DeepSeek V3.2/V4,
# GLM-5: vLLM builds their attention with use_sparse=True and refuses a dense MLA backend).
ModelKind = Literal["mha", "mla", "mla-sparse"]
MODEL_KINDS: tuple[str, ...] = get_args(ModelKind)


class Rollout(Strict):
    """A staged rollout: the candidate is tried on ``percent`` of the nodes it applies to (on a
    ``[[disable]]``: the switch-off applies on ``percent`` of the nodes).

    Which nodes is a stable hash of each node's identity salted with the feature, the
    candidate and ``salt`` (change it to draw another cohort; a disable's cohorts are drawn
    apart from its candidate's); raising ``percent`` only adds nodes, and 0 is the kill switch
    of a candidate, a disable that applies nowhere (see :mod:`kernelpolicy.policy.rollout`).
    """

    percent: float
    salt: str = ""

    @field_validator("percent", mode="before")
    @classmethod
    def _share(cls, value: object) -> float:
        """A number from 0 to 100 with at most two decimals; each mistake named with the value
        given (pydantic's own words did not say which: nan read "less than or equal to 100")."""
        expected = "expected a number from 0 to 100 (the share of nodes, such as 5 or 12.5)"
        if isinstance(value, bool) or not isinstance(value, int | float):
            kind = {bool: "a boolean", str: "a string"}.get(type(value), type(value).__name__)
            raise ValueError(f"percent {repr(value)[:40]} is {kind}; {expected}")
        if not (math.isfinite(value) and 0 <= value <= 100):
            raise ValueError(f"percent {value} is out of range; {expected}")
        if abs(value * 100 - round(value * 100)) > 1e-6:
            raise ValueError(f"percent {value}: at most two decimals (0.01% is the smallest step)")
        return float(value)

    @field_validator("salt")
    @classmethod
    def _salt_text(cls, value: str) -> str:
        if not _SALT.fullmatch(value):
            raise ValueError(
                f"salt {value[:80]!r}: expected at most 64 letters, digits, '.', '_' or '-'"
            )
        return value


_ENTRY = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*\Z")


class HaltOn(Strict):
    """When a candidate is halted on a node: its output guard tripped ``guard_trips`` times, or
    it failed at run time ``runtime_failures`` times, as the node's workers report them to its
    daemon. The daemon then resolves without it on that node until an operator clears it
    (``kernelpolicy status --clear-halt FEATURE``) or the feature's policy changes (a rollout
    percent moving is no change: a staged rollout keeps the node's halt)."""

    guard_trips: int | None = Field(default=None, ge=1, le=MAX_HALT_THRESHOLD, strict=True)
    runtime_failures: int | None = Field(default=None, ge=1, le=MAX_HALT_THRESHOLD, strict=True)

    @model_validator(mode="after")
    def _some(self) -> HaltOn:
        if self.guard_trips is None and self.runtime_failures is None:
            raise ValueError("halt_on needs 'guard_trips' or 'runtime_failures' (or both)")
        return self


class Candidate(Strict):
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
    rollout: Rollout | None = None
    halt_on: HaltOn | None = None

    _engine_names = field_validator("engines")(lambda cls, v: check_engines(v))
    _specs = field_validator("capability", "driver", "cuda", "rocm", "torch")(
        lambda cls, v: check_specifier(v)
    )
    _libs = field_validator("libraries")(lambda cls, v: check_libraries(v))

    @field_validator("impl")
    @classmethod
    def _impl_name(cls, value: str) -> str:
        if not IDENT.fullmatch(value):
            raise ValueError(f"implementation name {value!r}: expected lower_snake_case")
        return value

    @field_validator("arch", "exclude_arch")
    @classmethod
    def _arch_names(cls, value: list[str] | None) -> list[str] | None:
        return check_arch_list(value)

    @field_validator("entry")
    @classmethod
    def _entry_point(cls, value: str | None) -> str | None:
        if value is not None and not _ENTRY.fullmatch(value):
            raise ValueError(f"entry {value!r}: expected 'package.module:function'")
        return value

    @model_validator(mode="after")
    def _halt_on_a_guard(self) -> Candidate:
        guarded = any(k.action == "guard" for k in self.known_issues)
        if self.halt_on is not None and self.halt_on.guard_trips is not None and not guarded:
            raise ValueError(
                "halt_on.guard_trips on a candidate without an output guard: it would never "
                "trip; add a known issue with action = 'guard', or use runtime_failures"
            )
        return self

    @property
    def unconditional(self) -> bool:
        """True when nothing about the platform, environment or call can reject it."""
        return candidate_unconditional(self)


class Requirement(Strict):
    """The feature must not silently fall back (on ``vendor``, or everywhere).

    ``engines``: per engine, the releases (a PEP 440 range) whose runs need it; an engine
    release outside the range has its own path for the feature, so the error tells it nothing
    and does not stop it (``env``/``exec`` warn instead). An engine not named: every release.
    """

    vendor: Vendor | None = None
    hint: str
    engines: dict[str, str] = Field(default_factory=dict)

    @field_validator("engines")
    @classmethod
    def _engine_ranges(cls, value: dict[str, str]) -> dict[str, str]:
        for engine, versions in value.items():
            if not IDENT.match(engine):
                raise ValueError(f"engine {engine!r}: expected lower_snake_case such as 'vllm'")
            check_specifier(versions)
        return value


class Feature(Strict):
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
    # Every implementation must give the same draws (a feature whose results are compared
    # across implementations): a check that only differs by a convention (the tie rule) then
    # counts as a failure of ``kernelpolicy verify`` evidence; otherwise it does not.
    same_draws: bool = False
    # Settings that only matter for one kind of model (a dense MLA backend, the sparse-MLA
    # indexer); the bridge tells the engine only when asked for that kind (``--model-kind``):
    # ``mha``, ``mla`` (dense MLA: DeepSeek V2/V3/R1, Kimi K2) or ``mla-sparse`` (sparse MLA
    # with an indexer: DeepSeek V3.2/V4, GLM-5).
    model_kind: ModelKind | None = None
    engines: dict[str, list[EngineRule]] = Field(default_factory=dict)
    by_batch: list[BatchRoute] = Field(default_factory=list)
    dtypes: list[str] = Field(default_factory=list)

    _engine_names = field_validator("engines")(lambda cls, v: check_engines(v))

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
        check_routes(self.by_batch, self.dtypes, self.context, names)
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
            if fallback.halt_on is not None:
                raise ValueError(
                    f"halt_on on the fallback {self.fallback!r}: halting it would leave nothing "
                    "to serve; put halt_on on the accelerated candidates"
                )
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
        if not IDENT.fullmatch(variable) or keyword.iskeyword(variable):
            raise ValueError(
                f"context variable {variable!r}: expected a lower_snake_case name that is not a "
                "Python keyword"
            )
        if variable in STATIC_VARIABLES:
            raise ValueError(
                f"context variable {variable!r} shadows the platform variable of that name"
            )


class GateRequires(Strict):
    feature: str
    impl: str


class Gate(Strict):
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


class Disable(Strict):
    """An operator's switch-off: never choose ``impl`` for ``feature``, with the reason why.

    ``rollout`` stages it: it applies only on the nodes of its cohort (``percent`` of the
    fleet, 100 everywhere, 0 nowhere; a node without an identity is in no partial rollout).
    A disable is no part of its feature's policy, so moving its percent (or adding or removing
    it) keeps a node's ``halt_on`` halts, as a candidate's rollout percent moving does.
    """

    feature: str
    impl: str
    reason: str
    reference: str | None = None
    rollout: Rollout | None = None


class PolicyFile(Strict):
    """One TOML file of a policy set."""

    schema_id: Literal["kernelpolicy.policy/v1"] = Field(alias="schema")
    features: dict[str, Feature] = Field(default_factory=dict)
    gates: dict[str, Gate] = Field(default_factory=dict)
    disable: list[Disable] = Field(default_factory=list)

    @field_validator("features", "gates")
    @classmethod
    def _names(cls, value: dict[str, object]) -> dict[str, object]:
        for name in value:
            if not _FEATURE.fullmatch(name):
                raise ValueError(
                    f"name {name!r}: expected dotted lower_snake_case (sampler.greedy)"
                )
        return value
