"""``kernelpolicy check``: everything it checks beyond loading, and its one entry point.

:func:`check_policies` loads a set (trust, limits, syntax, schema: :mod:`kernelpolicy.policy`),
then runs every lint on it (:func:`lint`) and resolves it on every bundled platform fixture and
each ``--platform`` given (:mod:`.preflight`). The lints: candidates that can never be chosen,
unimportable entries and liftable workarounds (:mod:`.candidates`); the bridge's rules, linted
(:mod:`.bridge_lint`) and proven against the inference engines' knob tables
(:mod:`.bridge_proof`); per-call routing (:mod:`.routes`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kernelpolicy.check.bridge_lint import lint_bridge_rules
from kernelpolicy.check.bridge_proof import prove_bridge_rules
from kernelpolicy.check.candidates import liftable_workarounds, lint_candidates
from kernelpolicy.check.preflight import preflight
from kernelpolicy.check.routes import lint_routes
from kernelpolicy.errors import PolicyError, PolicyIssue, UntrustedFileError
from kernelpolicy.platform.fixtures import fixture_platforms
from kernelpolicy.platform.model import Platform, load_platform
from kernelpolicy.policy.compiled import PolicySet
from kernelpolicy.policy.files import EMPTY_DIRECTORY, list_policy_paths
from kernelpolicy.policy.loader import load_policies

__all__ = ["CheckReport", "check_policies", "lint"]


@dataclass(frozen=True)
class CheckReport:
    """What ``check`` found: the files it read, the set (None where it did not load), every
    issue (none: the set is fine) and notes that are no mistake (a directory given that holds
    no policy file, while other paths do: an empty ``+DIR`` adds nothing)."""

    files: list[str]
    policies: PolicySet | None
    issues: list[PolicyIssue]
    notes: list[str]


def check_policies(
    paths: Sequence[Path], platforms: Sequence[Path] = (), *, allow_untrusted: bool = False
) -> CheckReport:
    """Load the policy files under ``paths`` and check them, each mistake an issue.

    Args:
        paths: Policy files or directories.
        platforms: Platform snapshot files: workarounds that may be lifted there are reported,
            and the set must resolve there as on every bundled fixture.
        allow_untrusted: The trust opt-out (``KERNELPOLICY_ALLOW_UNTRUSTED_FILES``).

    Returns:
        The report; a policy or platform file that cannot be read or loaded is an issue too.
    """
    policies = None
    files: list[str] = []
    notes: list[str] = []
    try:
        listing = list_policy_paths(paths)
        files = [str(f) for f in listing.files]
        notes = [f"{d}: {EMPTY_DIRECTORY}; it adds no policies" for d in listing.empty_directories]
        policies = load_policies(paths, allow_untrusted=allow_untrusted)
        given = [(str(p), load_platform(p)) for p in platforms]
        issues = lint(policies, given)
        issues += preflight(policies, [*fixture_platforms(), *given])
    except PolicyError as exc:
        issues = exc.issues
    except UntrustedFileError as exc:  # a line for each path refused
        issues = list(exc.issues) or [PolicyIssue("<policies>", str(exc))]
    return CheckReport(files, policies, issues, notes)


def lint(policies: PolicySet, platforms: Iterable[tuple[str, Platform]] = ()) -> list[PolicyIssue]:
    """Every lint's issues with ``policies``: candidates that can never be chosen, bridge rules,
    routing, and every workaround whose lift condition holds on one of ``platforms`` (name,
    platform)."""
    issues = lint_candidates(policies)
    issues += lint_bridge_rules(policies)
    issues += prove_bridge_rules(policies)
    issues += lint_routes(policies)
    issues += liftable_workarounds(policies, platforms)
    return issues
