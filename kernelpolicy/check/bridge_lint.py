"""``kernelpolicy check`` lints of the bridge's rules (a policy's ``engines`` tables): rules that
can never apply, choices an inference engine is never told about, and settings that would switch
off the very candidate they select."""

from __future__ import annotations

from kernelpolicy.errors import PolicyIssue, SettingsError
from kernelpolicy.policy.compiled import CompiledEngineRule, CompiledFeature, PolicySet
from kernelpolicy.settings import parse_bool


def lint_bridge_rules(policies: PolicySet) -> list[PolicyIssue]:
    """Every problem of ``policies``' bridge rules, located at the feature or candidate."""
    issues: list[PolicyIssue] = []
    for feature in policies.features.values():
        issues += _unreachable(feature)
        issues += _untold(feature)
        issues += _self_switching(feature)
    return issues


def _conditional(rule: CompiledEngineRule) -> bool:
    spec = rule.spec
    return bool(spec.versions or spec.vendor or spec.arch or spec.libraries or spec.if_on)


def _issue(feature: CompiledFeature, impl: str | None, message: str) -> PolicyIssue:
    candidate = feature.candidate(impl) if impl else None
    source = candidate.source if candidate else feature.source
    key = f"candidates[{impl}].engines" if impl else "engines"
    return PolicyIssue(source.file, message, source.line, feature.name, key)


def _rule_sets(
    feature: CompiledFeature,
) -> list[tuple[str | None, str, tuple[CompiledEngineRule, ...]]]:
    sets: list[tuple[str | None, str, tuple[CompiledEngineRule, ...]]] = [
        (None, engine, rules) for engine, rules in feature.engines.items()
    ]
    for candidate in feature.candidates:
        sets += [(candidate.impl, engine, rules) for engine, rules in candidate.engines.items()]
    return sets


def _unreachable(feature: CompiledFeature) -> list[PolicyIssue]:
    issues = []
    for impl, engine, rules in _rule_sets(feature):
        for index, rule in enumerate(rules[:-1]):
            if not _conditional(rule):
                issues.append(
                    _issue(
                        feature, impl,
                        f"{engine} rule {index + 2} can never apply: rule {index + 1} has no "
                        "condition (versions, vendor, arch, libraries, if_on) and always does",
                    )
                )  # fmt: skip
                break
    return issues


def _untold(feature: CompiledFeature) -> list[PolicyIssue]:
    issues = []
    told = {engine for c in feature.candidates for engine in c.engines}
    for engine in sorted(told - set(feature.engines)):
        for candidate in feature.candidates:
            if engine not in candidate.engines:
                issues.append(
                    _issue(
                        feature, candidate.impl,
                        f"no {engine} rule: where {candidate.impl!r} is chosen, {engine} would "
                        "not be told (add engines." + engine + " to it, or to the feature)",
                    )
                )  # fmt: skip
    return issues


def _self_switching(feature: CompiledFeature) -> list[PolicyIssue]:
    """A rule's variable that is also one of its candidate's switches must, read back by the
    policy, leave that candidate on."""
    issues = []
    for candidate in feature.candidates:
        switches = {s.env: s for s in candidate.spec.switches}
        for engine, rules in candidate.engines.items():
            for rule in rules:
                for key, value in rule.spec.env.items():
                    switch = switches.get(key)
                    if switch is None:
                        continue
                    state: str
                    try:
                        state = switch.true if parse_bool(key, value) else switch.false
                    except SettingsError:
                        state = "unreadable"
                    if state in {"off", "unreadable"}:
                        issues.append(
                            _issue(
                                feature, candidate.impl,
                                f"{engine} rule sets {key}={value}, which the policy reads as "
                                f"{state} for {candidate.impl!r}: the engine would be told to "
                                "run a candidate the same setting rejects",
                            )
                        )  # fmt: skip
    return issues
