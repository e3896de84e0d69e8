"""``kernelpolicy check`` lints of candidates: those that can never be chosen, entries whose
module cannot be found, and workarounds that may already be lifted on a given platform."""

from __future__ import annotations

from collections.abc import Iterable

from kernelpolicy.errors import PolicyIssue
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy.compiled import CompiledCandidate, CompiledFeature, PolicySet
from kernelpolicy.policy.entries import entry_problem

# Capabilities of real devices, to tell a range that matches none of them.
_CAPABILITIES = {
    "nvidia": ["3.5", "3.7", "5.0", "5.2", "6.0", "6.1", "7.0", "7.2", "7.5", "8.0", "8.6",
               "8.7", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1"],
    "amd": ["9.0", "9.4", "9.5", "10.1", "10.3", "11.0", "11.5", "12.0", "12.5"],
}  # fmt: skip


def lint_candidates(policies: PolicySet) -> list[PolicyIssue]:
    """Every candidate that can never be chosen, and every entry that cannot be imported here."""
    issues: list[PolicyIssue] = []
    for feature in policies.features.values():
        issues.extend(_never_chosen(feature))
        issues.extend(_unimportable(feature))
    return issues


def liftable_workarounds(
    policies: PolicySet, platforms: Iterable[tuple[str, Platform]]
) -> list[PolicyIssue]:
    """Every workaround whose lift condition holds on one of ``platforms`` (name, platform)."""
    issues: list[PolicyIssue] = []
    for name, platform in platforms:
        for feature in policies.features.values():
            for candidate in feature.candidates:
                issues.extend(_liftable(candidate, name, platform))
    return issues


def _issue(candidate: CompiledCandidate, message: str, key: str = "impl") -> PolicyIssue:
    return PolicyIssue(
        candidate.source.file, message, candidate.source.line, candidate.feature,
        f"candidates[{candidate.impl}].{key}",
    )  # fmt: skip


def _never_chosen(feature: CompiledFeature) -> list[PolicyIssue]:
    issues = []
    blocker: CompiledCandidate | None = None
    # A by_batch row puts the candidates it prefers first for its batch sizes.
    preferred = {impl for row in feature.spec.by_batch for impl in row.prefer}
    for candidate in feature.candidates:
        spec = candidate.spec
        if blocker is not None and spec.impl not in preferred:
            issues.append(
                _issue(
                    candidate,
                    f"{spec.impl!r} can never be chosen: {blocker.impl!r} before it is always "
                    "available (move it after, or give the earlier one requirements)",
                )
            )
            continue
        if spec.unconditional:
            blocker = candidate
        prefixes = {"nvidia": "sm_", "amd": "gfx"}
        if spec.vendor and spec.arch:
            wrong = [a for a in spec.arch if not a.startswith(prefixes[spec.vendor])]
            if wrong:
                issues.append(
                    _issue(
                        candidate, f"arch {wrong[0]} never occurs on vendor {spec.vendor}", "arch"
                    )
                )
        if spec.arch and set(spec.arch) <= set(spec.exclude_arch):
            issues.append(
                _issue(candidate, "every arch it allows is also excluded", "exclude_arch")
            )
        if candidate.capability is not None:
            vendors = [spec.vendor] if spec.vendor else list(_CAPABILITIES)
            if not any(candidate.capability.contains(c) for v in vendors for c in _CAPABILITIES[v]):
                issues.append(
                    _issue(
                        candidate,
                        f"capability {spec.capability} matches no real device of "
                        f"{' or '.join(vendors)}",
                        "capability",
                    )
                )
        for switch in spec.switches:
            if {switch.unset, switch.true, switch.false} == {"off"}:
                issues.append(
                    _issue(candidate, f"switch {switch.env} is off in every case", "switches")
                )
    return issues


def _unimportable(feature: CompiledFeature) -> list[PolicyIssue]:
    """Entries whose module cannot be found here (found without importing anything)."""
    return [
        _issue(candidate, f"entry cannot be imported here: {problem}", "entry")
        for candidate in feature.candidates
        if candidate.spec.entry and (problem := entry_problem(candidate.spec.entry))
    ]


def _liftable(candidate: CompiledCandidate, name: str, platform: Platform) -> list[PolicyIssue]:
    issues = []
    for workaround in candidate.workarounds:
        if not workaround.lift_when:
            continue
        if all(check.satisfied(platform.libraries) for check in workaround.lift_when):
            met = [f"{c.name} {platform.libraries[c.name]}" for c in workaround.lift_when]
            issues.append(
                _issue(
                    candidate,
                    f"workaround '{workaround.spec.reason}' can be lifted on {name}: its condition "
                    f"is met ({', '.join(met)}); remove it",
                    "workarounds",
                )
            )
    return issues
