"""Translate a :class:`~kernelpolicy.engine.Resolution` into what one engine is told.

Pure: the resolution, the engine's name and version and the environment in; frozen
:class:`EngineSettings` out. Each decision's chosen candidate (else its feature) lists rules per
engine; the first whose conditions hold says which variables and flags make that engine run the
implementation, or that it cannot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from packaging.version import Version

from kernelpolicy.bridge.context import RuleContext
from kernelpolicy.bridge.merging import kept_variables, merged, overriding
from kernelpolicy.bridge.model import (
    EngineSettings,
    Status,
    Told,
)
from kernelpolicy.bridge.per_call import per_batch, per_dtype, unmet_note
from kernelpolicy.bridge.plugin import ENABLE as PLUGIN_SWITCH
from kernelpolicy.bridge.plugin import carried_to_workers, plugin_blocked, plugin_routes
from kernelpolicy.bridge.release import MatchedRelease, named_versions
from kernelpolicy.engine.model import Decision
from kernelpolicy.engine.resolution import Resolution
from kernelpolicy.errors import SettingsError
from kernelpolicy.inputs import distribution
from kernelpolicy.knobs import PLUGIN_BYPASS, PLUGIN_FEATURES, knob_table, runner_v2_routed
from kernelpolicy.policy.compiled import CompiledEngineRule, CompiledFeature
from kernelpolicy.policy.schema.model import MODEL_KINDS
from kernelpolicy.versions import LazySpecifierSet

__all__ = ["MODEL_KINDS", "engine_settings"]


def engine_settings(
    resolution: Resolution,
    engine: str,
    env: Mapping[str, str],
    *,
    engine_version: str | None = None,
    model_kind: str = "mha",
) -> EngineSettings:
    """What ``engine`` must be told to run what ``resolution`` decided.

    Args:
        resolution: The decisions, for the platform and environment ``env``.
        engine: ``vllm``, ``sglang``, or another engine the policies name.
        env: The environment the resolution used; variables set here are the user's and are
            never overwritten.
        engine_version: The engine's version; default: the platform's installed distribution.
        model_kind: One of :data:`MODEL_KINDS` (``mha``; ``mla``: dense MLA; ``mla-sparse``:
            MLA with a sparse indexer): features marked for another kind are not told.

    Returns:
        The settings; ``errors`` non-empty means the engine must not be started.

    Raises:
        SettingsError: ``model_kind`` is not one of :data:`MODEL_KINDS`.
    """
    if model_kind not in MODEL_KINDS:
        raise SettingsError(
            f"unknown model kind {model_kind!r}: expected one of {', '.join(MODEL_KINDS)}"
        )
    platform = resolution.platform
    version = engine_version or platform.libraries.get(distribution(engine))
    features = resolution.policies.features
    rules = [rule for feature in features.values() for rule in _all_rules(feature, engine)]
    release = MatchedRelease(engine, version, named_versions(rules))
    teller, told, merged_env, flags = _tell_until_settled(
        resolution, engine, env, release, model_kind
    )
    versioned = any(rule.versions for rule in rules)
    warnings, about = _warnings(engine, env, teller, told, release, versioned=versioned)
    errors = teller.errors
    kept = _operators_variables(
        engine, env, merged_env, release, told=told, features=features, warnings=warnings,
        about=about,
    )  # fmt: skip
    return EngineSettings(
        engine=engine, version=version, release=release.known, fingerprint=resolution.fingerprint,
        model_kind=model_kind, env=merged_env, flags=tuple(flags), decisions=told,
        warnings=tuple(warnings), errors=tuple(errors), kept=kept, feature_warnings=tuple(about),
        release_note=release.note if versioned else None,
    )  # fmt: skip


def _warnings(
    engine: str,
    env: Mapping[str, str],
    teller: _Teller,
    told: Mapping[str, Told],
    release: MatchedRelease,
    *,
    versioned: bool,
) -> tuple[list[str], list[tuple[str, str]]]:
    """The settings' warnings, and (feature, warning) for those about one feature: the
    teller's, one per told decision no setting of ``engine`` expresses, the release's note
    first where a rule names the engine's versions (``versioned``), and one per variable of
    ``env`` the release does not read."""
    warnings = teller.warnings
    about = list(teller.about)
    for t in told.values():
        if t.inexpressible:
            warnings.append(_inexpressible_warning(engine, t))
            about.append((t.feature, warnings[-1]))
    if versioned and release.note:
        warnings.insert(0, release.note)
    warnings += release.unread(env)
    return warnings, about


def _tell_until_settled(
    resolution: Resolution,
    engine: str,
    env: Mapping[str, str],
    release: MatchedRelease,
    model_kind: str,
) -> tuple[_Teller, dict[str, Told], dict[str, str], list[str]]:
    """Each decision told, with ``if_on`` asked about the environment the engine will see, and
    what they tell it merged into one environment and one flag list (the teller holds the
    errors of both).

    That environment holds what the other decisions tell it (SGLANG_USE_AITER for attention
    turns SGLang's aiter greedy sampler on): told once with the user's environment, then again
    with what the engine gets, until the two agree. Rules whose ``if_on`` depend on each other's
    values may never agree: that is an error of the teller's.
    """
    features = resolution.policies.features
    seen: Mapping[str, str] = env
    unsettled: set[str] = set()  # what kept changing after the first pass
    for attempt in range(len(features) + 2):
        context = RuleContext(resolution.platform, seen, release.matched, release.given)
        teller = _Teller(engine, context, model_kind, release, env)
        told = {
            name: _with_gives_up(teller.tell(features[name], decision), resolution)
            for name, decision in resolution.decisions.items()
        }
        told_env, flags = merged(told, teller.errors)
        sees = {**env, **told_env, **{k: v for k, v in env.items() if v.strip()}}
        if sees == seen:
            return teller, told, told_env, flags
        if attempt:
            unsettled |= {k for k in {*sees, *seen} if sees.get(k) != seen.get(k)}
        seen = sees
    teller.errors.append(
        f"the {engine} rules never settle: what they tell {engine} turns their own if_on "
        f"conditions on and off ({', '.join(sorted(unsettled))}); a rule's if_on may not "
        "depend on a value another rule's if_on decides"
    )
    return teller, told, told_env, flags


def _tells_any_engine(feature: CompiledFeature) -> bool:
    """Whether some policy rule tells some engine about ``feature``."""
    return any(feature.engines.values()) or any(
        rules for c in feature.candidates for rules in c.engines.values()
    )


def _operators_variables(
    engine: str,
    env: Mapping[str, str],
    merged_env: dict[str, str],
    release: MatchedRelease,
    *,
    told: Mapping[str, Told],
    features: Mapping[str, CompiledFeature],
    warnings: list[str],
    about: list[tuple[str, str]],
) -> dict[str, str]:
    """The operator's own variables in what ``engine`` is told: the lists its workers are given
    extended (carried), the rest kept as set (returned), ``merged_env`` updated with both; and a
    warning (in ``warnings`` and ``about``) for each kept one that overrides a choice told."""
    carried = carried_to_workers(engine, merged_env, env, release.reads)
    merged_env.update(carried)  # the operator's list, extended: not overwritten, so not kept
    kept = kept_variables(engine, env, merged_env, carried, warnings)
    merged_env.update(kept)
    for feature, text in overriding(
        engine, env, told, features, sent=merged_env, reads=release.reads, version=release.matched
    ):
        warnings.append(text)
        about.append((feature, text))
    return kept


def _all_rules(feature: CompiledFeature, engine: str) -> list[CompiledEngineRule]:
    rules = list(feature.engines.get(engine, ()))
    for candidate in feature.candidates:
        rules += candidate.engines.get(engine, ())
    return rules


class _Teller:
    """Works out one decision at a time, collecting the errors and warnings on the way."""

    def __init__(
        self,
        engine: str,
        context: RuleContext,
        model_kind: str,
        release: MatchedRelease,
        operator_env: Mapping[str, str],
    ) -> None:
        self.engine = engine
        self.context = context
        self.operator_env = operator_env  # what the resolution read (context.env adds what is told)
        self.model_kind = model_kind
        self.release = release
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self.about: list[tuple[str, str]] = []  # (feature, warning) of the warnings about one

    def warn(self, feature: str, text: str) -> None:
        self.warnings.append(text)
        self.about.append((feature, text))

    def tell(self, feature: CompiledFeature, decision: Decision) -> Told:
        name, impl, engine = feature.name, decision.impl, self.engine
        relevant = bool(_all_rules(feature, engine))
        kind = feature.spec.model_kind
        if relevant and kind not in (None, self.model_kind):
            return Told(name, impl, Status.OTHER_MODEL_KIND, note=decision.error, model_kind=kind)
        if relevant:  # as this release reads the variables that decided it
            env = self.context.env
            decision, said = self.release.as_read(feature, decision, env, self.operator_env)
            if said is not None:
                self.warn(name, said)
            impl = decision.impl
        if decision.error is not None:
            return self.told_error(feature, decision.error, relevant)
        if not relevant:
            return Told(name, impl, Status.NOT_FOR_ENGINE)
        if impl is None:
            return Told(name, None, Status.NOT_APPLICABLE)
        by_batch, conditions = per_batch(feature, decision)
        told = self._by_rule(feature, impl)
        if told.status is Status.INEXPRESSIBLE and self.required_here(feature):
            return self.refused(feature, told)
        by_dtype = per_dtype(decision, impl)
        told = replace(told, by_batch=by_batch, batch_conditions=conditions, by_dtype=by_dtype)
        routes = plugin_routes(engine, self.context.env, self.context.given, name)
        if (told.per_batch or told.per_dtype) and told.plugin is None and routes:
            note = "routes the engine's calls per call through resolve().select()"
            told = replace(told, plugin=note, env=(*told.env, (PLUGIN_SWITCH, "1")))
        if told.plugin is not None and name in PLUGIN_FEATURES.get(engine, frozenset()):
            self.bypass_warning(name)
        elif told.plugin is None and told.status in (Status.TOLD, Status.DEFAULT):
            unmet = unmet_note(feature, decision, impl, engine, self.context.platform)
            if unmet is not None:
                self.warn(name, unmet)
        return told

    def told_error(self, feature: CompiledFeature, error: str, relevant: bool) -> Told:
        """A decision that is an error: it stops this engine where it is told about the
        feature, unless the requirement leaves this release out; else a warning at most."""
        name, engine = feature.name, self.engine
        holds = self.requirement_elsewhere(feature) if relevant else None
        if holds is not None:
            self.warn(
                name,
                f"{name} is an error ({error}), but {engine} {self.context.version} "
                f"runs its own path for it (required for {engine} {holds}): not blocking",
            )
            return Told(name, None, Status.NOT_APPLICABLE, note=error)
        if relevant:
            self.errors.append(f"{name}: {error}")
            return Told(name, None, Status.ERROR, note=error)
        # A feature another engine is told about (a vLLM-only kernel switch while SGLang
        # is started) is that engine's business: its error and switches are not this one's.
        if not _tells_any_engine(feature):
            self.warn(
                name,
                f"{name} is an error ({error}), but no policy tells {engine} "
                "anything about it: not blocking",
            )
        return Told(name, None, Status.NOT_FOR_ENGINE, note=error)

    def required_here(self, feature: CompiledFeature) -> bool:
        """The feature must not fall back on this platform and this engine release."""
        required = feature.spec.required
        return (
            required is not None
            and required.vendor in (None, self.context.platform.vendor)
            and self.requirement_elsewhere(feature) is None
        )

    def refused(self, feature: CompiledFeature, told: Told) -> Told:
        """A required feature whose choice this release cannot run stops the engine (it would
        fail at the first call), naming the first known release that runs it."""
        name, engine, impl = feature.name, self.engine, told.impl or ""
        first = self.first_release_running(feature, impl)
        works = (
            f"{engine} {first} is the first release kernelpolicy knows to run it"
            if first else "no release kernelpolicy knows runs it here"
        )  # fmt: skip
        error = (
            f"{name} is required here, and {engine} {self.context.version or '(this release)'} "
            "cannot run "
            f"{impl}: {told.inexpressible}; {works}"
        )
        self.errors.append(error)
        return Told(name, impl, Status.ERROR, note=error, reference=told.reference)

    def first_release_running(self, feature: CompiledFeature, impl: str) -> str | None:
        """The oldest release of the knob tables, newer than this one, whose rule for ``impl``
        on this platform is expressible."""
        table = knob_table(self.engine)
        candidate = feature.candidate(impl)
        rules = (candidate.engines.get(self.engine) if candidate else None) or ()
        for release in table.releases if table is not None else ():
            version = Version(release)
            if self.context.version is not None and version <= self.context.version:
                continue
            later = RuleContext(self.context.platform, self.context.env, version)
            rule = next((r for r in rules if later.matches(r)), None)
            if rule is not None and not rule.spec.inexpressible:
                return release
        return None

    def requirement_elsewhere(self, feature: CompiledFeature) -> str | None:
        """The releases the feature's requirement holds for, where this engine release is not
        one of them (``required``'s ``engines``); None where it holds here, or the release is
        unknown (held to it)."""
        required = feature.spec.required
        versions = required.engines.get(self.engine) if required is not None else None
        if versions is None or self.context.version is None:
            return None
        inside = LazySpecifierSet(versions).contains(self.context.version, prereleases=True)
        return None if inside else versions

    def bypass_warning(self, feature: str) -> None:
        """Where the engine on a GPU samples by default without the hooks the plugin routes
        (``PLUGIN_BYPASS``: vLLM's Model Runner V2 in a release whose V2 sampler the plugin does
        not route, outside ``PLUGIN_RUNNER_V2``), say how the choice is carried."""
        variable, off = PLUGIN_BYPASS.get(self.engine, ("", ""))
        if not variable or self.context.platform.primary is None:
            return  # no GPU: vLLM's CPU build runs the V1 runner, whose hooks the plugin routes
        if runner_v2_routed(self.engine, self.context.given):
            return  # the plugin routes V2's sampler in this release too
        if self.context.env.get(variable, "").strip() == off:
            return
        self.warn(
            feature,
            f"{feature}: {self.engine}'s default model runner on a GPU samples with its own "
            "sampler and never calls the hooks kernelpolicy's plugin routes: the choice "
            f"reaches {self.engine} only with {variable}={off}",
        )

    def _by_rule(self, feature: CompiledFeature, impl: str) -> Told:
        name, engine = feature.name, self.engine
        candidate = feature.candidate(impl)
        rules = (candidate.engines.get(engine) if candidate else None) or feature.engines.get(
            engine
        )
        rule = next((r for r in rules or () if self.context.matches(r)), None)
        if rule is None:
            self.warn(
                name,
                f"{name}: the policy does not say how to tell {engine} to run {impl}"
                if rules is None
                else f"{name}: no {engine} rule for {impl} matches this platform and version",
            )
            return Told(name, impl, Status.UNDECLARED)
        spec = rule.spec
        status = (
            Status.INEXPRESSIBLE if spec.inexpressible
            else Status.PLUGIN if spec.plugin
            else Status.TOLD if spec.env or spec.flags
            else Status.DEFAULT
        )  # fmt: skip
        env = tuple(spec.env.items())
        blocked = plugin_blocked(engine, self.context.env) if spec.plugin else None
        if blocked is not None:
            return Told(
                name, impl, Status.INEXPRESSIBLE, env=env,
                inexpressible=f"kernelpolicy's {engine} plugin carries this choice and "
                f"{blocked}: {engine} keeps its own path",
                reference=spec.reference,
            )  # fmt: skip
        if spec.plugin:
            env += ((PLUGIN_SWITCH, "1"),)
        return Told(
            name, impl, status, env=env, flags=tuple(spec.flags),
            inexpressible=spec.inexpressible, shared_switch=spec.shared_switch,
            reference=spec.reference, plugin=spec.plugin,
        )  # fmt: skip


def _with_gives_up(told: Told, resolution: Resolution) -> Told:
    """List the other chosen kernels that the shared switch also turns on."""
    if told.shared_switch is None:
        return told
    lost = []
    for name, decision in resolution.decisions.items():
        if name == told.feature or decision.impl is None:
            continue
        candidate = resolution.policies.features[name].candidate(decision.impl)
        if candidate and any(s.env == told.shared_switch for s in candidate.spec.switches):
            lost.append(f"{name} ({decision.impl})")
    return replace(told, gives_up=tuple(lost))


def _inexpressible_warning(engine: str, told: Told) -> str:
    text = f"{told.feature}: {engine} cannot run exactly {told.impl}: {told.inexpressible}"
    if told.gives_up:
        text += f" Setting {told.shared_switch}=0 would also give up: {', '.join(told.gives_up)}."
    return text
