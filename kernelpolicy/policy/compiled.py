"""Compiled policies: frozen values with every specifier parsed and every CEL program compiled.

The engine reads only these; nothing here is parsed again at resolution or call time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from kernelpolicy.policy.rollout import CompiledRollout, compile_rollout
from kernelpolicy.versions import LazySpecifierSet, version_admitted

if TYPE_CHECKING:
    # Only types: the specs are schema models after a load, or records of them from the
    # compiled-pack cache (kernelpolicy.policy.record), which never imports the schema.
    from kernelpolicy.policy.schema import (
        Candidate,
        Disable,
        EngineRule,
        Feature,
        Gate,
        KnownIssue,
        LibrarySpec,
        Workaround,
    )


@dataclass(frozen=True)
class Source:
    """Where a policy element was written."""

    file: str
    line: int | None = None

    def __str__(self) -> str:
        return self.file if self.line is None else f"{self.file}:{self.line}"


@dataclass(frozen=True)
class LibraryCheck:
    """``name`` installed, in ``specifier`` when one is given (``None`` = any version)."""

    name: str
    text: str
    specifier: LazySpecifierSet | None
    compare: str = "full"

    @classmethod
    def build(cls, name: str, spec: LibrarySpec) -> LibraryCheck:
        text, compare = (spec, "full") if isinstance(spec, str) else (spec.version, spec.compare)
        specifier = None if text.strip() == "*" else LazySpecifierSet(text)
        return cls(name, text.strip(), specifier, compare)

    def satisfied(self, libraries: Mapping[str, str]) -> bool:
        """Installed, readable, and in range (compared as ``compare`` says)."""
        found = libraries.get(self.name)
        if found is None:
            return False
        specifier = _ANY_VERSION if self.specifier is None else self.specifier
        return version_admitted(found, specifier, base=self.compare == "base") is True


_ANY_VERSION = LazySpecifierSet("")  # "*": any version that reads


def _spec(text: str | None) -> LazySpecifierSet | None:
    return None if text is None or text.strip() == "*" else LazySpecifierSet(text)


@dataclass(frozen=True)
class CompiledIssue:
    spec: KnownIssue
    library: LibraryCheck | None


@dataclass(frozen=True)
class CompiledWorkaround:
    spec: Workaround
    lift_when: tuple[LibraryCheck, ...]


@dataclass(frozen=True)
class CompiledEngineRule:
    """One engine rule with its version range and library checks parsed."""

    spec: EngineRule
    versions: LazySpecifierSet | None
    libraries: tuple[LibraryCheck, ...]

    @classmethod
    def build(cls, spec: EngineRule) -> CompiledEngineRule:
        return cls(
            spec,
            _spec(spec.versions),
            tuple(LibraryCheck.build(n, s) for n, s in spec.libraries.items()),
        )


EngineRules = Mapping[str, tuple[CompiledEngineRule, ...]]


def compile_engines(engines: Mapping[str, list[EngineRule]]) -> EngineRules:
    """Engine name -> its rules, compiled, in the policy's order."""
    return {name: tuple(map(CompiledEngineRule.build, rules)) for name, rules in engines.items()}


@dataclass(frozen=True)
class CompiledCandidate:
    """One implementation of a feature, ready to check against a platform."""

    feature: str
    spec: Candidate
    source: Source
    capability: LazySpecifierSet | None
    versions: Mapping[str, LazySpecifierSet]  # driver / cuda / rocm / torch
    libraries: tuple[LibraryCheck, ...]
    issues: tuple[CompiledIssue, ...]
    workarounds: tuple[CompiledWorkaround, ...]
    when: Any  # a compiled CEL program, or None
    engines: EngineRules = field(default_factory=dict)
    rollout: CompiledRollout | None = None

    @property
    def impl(self) -> str:
        return self.spec.impl


@dataclass(frozen=True)
class CompiledFeature:
    name: str
    spec: Feature
    source: Source
    candidates: tuple[CompiledCandidate, ...]

    def candidate(self, impl: str) -> CompiledCandidate | None:
        return next((c for c in self.candidates if c.impl == impl), None)

    @cached_property
    def engines(self) -> EngineRules:
        """The feature's own engine rules: used where the chosen candidate has none."""
        return compile_engines(self.spec.engines)


@dataclass(frozen=True)
class CompiledGate:
    name: str
    spec: Gate
    source: Source
    rule: Any  # compiled CEL program


@dataclass(frozen=True)
class CompiledDisable:
    """An operator's ``[[disable]]``; ``rollout`` compiled from its spec when not given
    (``diff`` gives another percent of it, see :meth:`CompiledRollout.with_percent`)."""

    spec: Disable
    source: Source
    rollout: CompiledRollout | None = None

    def __post_init__(self) -> None:
        if self.rollout is None:
            # A record from a cache written before disables had rollouts has no such field.
            spec = getattr(self.spec, "rollout", None)
            compiled = compile_rollout(self.spec.feature, self.spec.impl, spec, disable=True)
            object.__setattr__(self, "rollout", compiled)


def switch_variables(switch: Any) -> tuple[str, ...]:
    """A switch's ``env`` and its ``aliases``, in the order they are read (a validated
    ``Switch``, or its record from the compiled-pack cache, which imports no pydantic)."""
    return (switch.env, *getattr(switch, "aliases", ()))


@dataclass(frozen=True)
class PolicySet:
    """Validated policies from one or more files; the engine's policy input.

    Attributes:
        digest: A hash of the files' contents, part of every resolution's fingerprint.
    """

    features: Mapping[str, CompiledFeature]
    gates: Mapping[str, CompiledGate]
    disables: tuple[CompiledDisable, ...]
    files: tuple[str, ...]
    digest: str
    env_names: frozenset[str] = field(default=frozenset())
    library_names: frozenset[str] = field(default=frozenset())

    @classmethod
    def build(
        cls,
        features: Mapping[str, CompiledFeature],
        gates: Mapping[str, CompiledGate],
        disables: tuple[CompiledDisable, ...],
        files: tuple[str, ...],
        digest: str,
    ) -> PolicySet:
        """The set, with the switch variables and libraries it reads collected."""
        return cls(
            features=features,
            gates=gates,
            disables=disables,
            files=files,
            digest=digest,
            env_names=frozenset(
                variable
                for f in features.values()
                for c in f.candidates
                for s in c.spec.switches
                for variable in switch_variables(s)
            ),
            library_names=frozenset(
                lib.name
                for f in features.values()
                for c in f.candidates
                for lib in (*c.libraries, *(i.library for i in c.issues if i.library))
            ),
        )

    @property
    def engine_names(self) -> tuple[str, ...]:
        """Every engine some feature or candidate tells, sorted."""
        names = {e for f in self.features.values() for e in f.spec.engines}
        names.update(e for f in self.features.values() for c in f.candidates for e in c.engines)
        return tuple(sorted(names))

    @property
    def model_kind_features(self) -> frozenset[str]:
        """The features of one kind of model only (``model_kind``: the sparse indexer of
        sparse-MLA models): their errors and warnings leave a resolution's log level alone."""
        return frozenset(n for n, f in self.features.items() if f.spec.model_kind)

    @property
    def needs_evidence(self) -> bool:
        """Some candidate says ``verified = true``, or some feature routes calls by dtype
        (``dtypes``): resolving needs the stored evidence."""
        return any(
            f.spec.dtypes or any(c.spec.verified for c in f.candidates)
            for f in self.features.values()
        )


def compile_candidate(
    feature: str, spec: Candidate, source: Source, when: Any
) -> CompiledCandidate:
    versions = {
        key: parsed
        for key in ("driver", "cuda", "rocm", "torch")
        if (parsed := _spec(getattr(spec, key))) is not None
    }
    return CompiledCandidate(
        feature=feature,
        spec=spec,
        source=source,
        capability=_spec(spec.capability),
        versions=versions,
        libraries=tuple(LibraryCheck.build(n, s) for n, s in spec.libraries.items()),
        issues=tuple(
            CompiledIssue(
                issue,
                LibraryCheck.build(
                    issue.library, issue.versions if issue.compare == "full" else _base(issue)
                )
                if issue.library and issue.versions
                else None,
            )
            for issue in spec.known_issues
        ),
        workarounds=tuple(
            CompiledWorkaround(
                w,
                tuple(LibraryCheck.build(n, s) for n, s in w.lift_when.libraries.items())
                if w.lift_when
                else (),
            )
            for w in spec.workarounds
        ),
        when=when,
        engines=compile_engines(spec.engines),
        rollout=compile_rollout(feature, spec.impl, spec.rollout),
    )


@dataclass(frozen=True)
class _BaseRange:
    """A known issue's range compared on the release only (``compare = "base"``)."""

    version: str
    compare: str = "base"


def _base(issue: KnownIssue) -> LibrarySpec:
    return _BaseRange(issue.versions or "*")  # type: ignore[return-value]
