"""What ``kernelpolicy check`` adds to loading: resolve the set on every platform it knows.

A file that ``check`` accepts must resolve: so ``check`` runs what ``resolve()`` runs (the engine
and the compilation of every per-call rule) on each bundled platform fixture and on each
``--platform`` given, and reports as an error anything that fails there, and every feature that
``[[disable]]`` entries leave with no implementation on a platform.
"""

from __future__ import annotations

from collections.abc import Iterable

from kernelpolicy.engine.decide import resolve_policies
from kernelpolicy.engine.model import ErrorCode
from kernelpolicy.errors import PolicyIssue
from kernelpolicy.limits import shown
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy.compiled import PolicySet


def preflight(policies: PolicySet, platforms: Iterable[tuple[str, Platform]]) -> list[PolicyIssue]:
    """Errors ``resolve()`` would meet with ``policies`` on each of ``platforms``.

    Args:
        policies: A loaded set.
        platforms: (name, platform) pairs; the name appears in the messages.

    Returns:
        One issue per failure to resolve on a platform, and one per feature that disables leave
        without an implementation (naming the platforms), located at its ``[[disable]]``.
    """
    issues: list[PolicyIssue] = []
    stripped: dict[str, list[str]] = {}
    for name, platform in platforms:
        try:
            resolution = resolve_policies(platform, dict(platform.env), policies)
        except Exception as exc:  # whatever it is, resolve() would meet it too
            where = policies.files[0] if policies.files else "<policies>"
            message = f"cannot be resolved on {name}: {type(exc).__name__}: {shown(str(exc), 200)}"
            issues.append(PolicyIssue(where, message))
            continue
        for feature, decision in resolution.decisions.items():
            if decision.error_code is ErrorCode.ALL_DISABLED:
                stripped.setdefault(feature, []).append(name)
    for feature, names in stripped.items():
        disable = next(d for d in policies.disables if d.spec.feature == feature)
        issues.append(
            PolicyIssue(
                disable.source.file,
                f"[[disable]] entries leave {feature} with no implementation on "
                f"{', '.join(names)} (disabling its fallback makes it an error there)",
                disable.source.line,
                feature,
                "disable",
            )
        )
    return issues
