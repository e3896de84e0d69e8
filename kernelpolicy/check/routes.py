"""``kernelpolicy check`` lints of per-call routing: ``by_batch`` rows that overlap (the later
row never applies where they do) or leave batch sizes uncovered (the candidate order serves
those), and CEL conditions that compare ``dtype`` with a name torch does not give a dtype."""

from __future__ import annotations

import re

from kernelpolicy.dtypes import DTYPE_SIZES, dtype_name
from kernelpolicy.engine.model import BatchRoute
from kernelpolicy.engine.routing import uncovered
from kernelpolicy.errors import PolicyIssue
from kernelpolicy.policy.compiled import CompiledFeature, PolicySet

# `dtype == "x"`, `"x" != dtype`, `dtype in ["x", "y"]`: the names a condition compares with.
_COMPARED = re.compile(
    r"""\bdtype\s*[!=]=\s*(?P<q1>["'])(?P<a>[^"']*)(?P=q1)"""
    r"""|(?P<q2>["'])(?P<b>[^"']*)(?P=q2)\s*[!=]=\s*dtype\b"""
    r"""|\bdtype\s+in\s*\[(?P<list>[^\]]*)\]"""
)
_LITERAL = re.compile(r"""["']([^"']*)["']""")


def lint_routes(policies: PolicySet) -> list[PolicyIssue]:
    """Every overlap and gap of ``by_batch`` rows, and every unknown dtype name compared."""
    issues: list[PolicyIssue] = []
    for feature in policies.features.values():
        issues += _batch_rows(feature)
        for candidate in feature.candidates:
            if candidate.spec.when:
                issues += [
                    _issue(feature, message, f"candidates[{candidate.impl}].when")
                    for message in _unknown_dtypes(candidate.spec.when)
                ]
    for gate in policies.gates.values():
        for message in _unknown_dtypes(gate.spec.rule):
            issues.append(
                PolicyIssue(gate.source.file, message, gate.source.line, gate.name, "rule")
            )
    return issues


def _issue(feature: CompiledFeature, message: str, key: str) -> PolicyIssue:
    return PolicyIssue(feature.source.file, message, feature.source.line, feature.name, key)


def _label(low: int, high: int | None) -> str:
    if high is None:
        return f"{low} and up"
    return str(low) if low == high else f"{low}-{high}"


def _batch_rows(feature: CompiledFeature) -> list[PolicyIssue]:
    rows = feature.spec.by_batch
    issues = []
    for later, row in enumerate(rows):
        for earlier in range(later):
            other = rows[earlier]
            low = max(row.min, other.min)
            highs = [h for h in (row.max, other.max) if h is not None]
            high = min(highs) if highs else None
            if high is None or low <= high:
                issues.append(
                    _issue(
                        feature,
                        f"batch {_label(low, high)} is also in by_batch[{earlier}], which comes "
                        "first: this row never applies there",
                        f"by_batch[{later}]",
                    )
                )
    if rows:
        gaps = uncovered([BatchRoute(r.min, r.max, ()) for r in rows])
        if gaps:
            text = ", ".join(_label(low, high) for low, high in gaps)
            issues.append(
                _issue(
                    feature,
                    f"no by_batch row covers batch {text}: the candidates' order serves it "
                    "(add a row if that was not meant)",
                    "by_batch",
                )
            )
    return issues


def _unknown_dtypes(source: str) -> list[str]:
    names: list[str] = []
    for match in _COMPARED.finditer(source):
        if match.group("list") is not None:
            names += _LITERAL.findall(match.group("list"))
        else:
            names.append(match.group("a") if match.group("a") is not None else match.group("b"))
    known = ", ".join(sorted(DTYPE_SIZES))
    return [
        f"compares dtype with {name[:40]!r}, which is no dtype name torch gives (known: {known})"
        for name in dict.fromkeys(names)
        if dtype_name(name) not in DTYPE_SIZES
    ]
