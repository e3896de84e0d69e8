"""Which decision errors fail a command, and the stderr lines that say why it exits 1.

A feature marked ``model_kind = "mla-sparse"`` (DeepSeek's sparse attention indexer, its MHC
mixing), ``"mla"`` (the attention backend of dense MLA models) or ``"mha"`` (that of every other
model) matters only to that kind of model: its error stops an engine started for such a model
(``env``/``exec``, ``--model-kind``, default ``mha``), and it is shown everywhere. ``explain``
and ``matrix`` count the same errors as ``env`` and ``exec`` for the same ``--model-kind``: those
that hold for every model and those of the kind named (default ``mha``), so that a node that
passes ``explain`` starts its engine.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernelpolicy.engine.model import Decision
    from kernelpolicy.policy.compiled import PolicySet


def add_model_kind_option(parser: argparse.ArgumentParser) -> None:
    """``--model-kind`` for commands whose exit status counts decision errors."""
    from kernelpolicy.bridge import MODEL_KINDS

    parser.add_argument(
        "--model-kind", choices=MODEL_KINDS, default="mha",
        help="count the errors of features this kind of model uses, beside those of every "
        "model, as env and exec do (mla: dense MLA, DeepSeek V3/R1; mla-sparse: MLA with a "
        "sparse indexer, DeepSeek V3.2/V4, GLM-5); default mha",
    )  # fmt: skip


def scope_of(policies: PolicySet, feature: str) -> str | None:
    """The kind of model ``feature`` matters to (``mla-sparse``), or None: every model."""
    compiled = policies.features.get(feature)
    return compiled.spec.model_kind if compiled is not None else None


def counted(policies: PolicySet, feature: str, model_kind: str) -> bool:
    """Whether an error of ``feature`` fails the command for ``model_kind``: it holds for every
    model, or for that kind."""
    scope = scope_of(policies, feature)
    return scope is None or scope == model_kind


def report_exit(
    policies: PolicySet,
    decisions: Iterable[tuple[str, Decision]],
    model_kind: str,
    where: str = "",
) -> int:
    """1 when a counted decision is an error, else 0; the errors are said on stderr, one line
    for the features that fail alike (the same kind of model, the same error code: one bad
    variable errs a dozen features), the counted ones saying they set the exit status, the
    others why they do not.

    Args:
        policies: The policies the decisions came from (for each feature's model kind).
        decisions: (feature, decision) pairs, in the order to report them.
        model_kind: ``--model-kind`` (``mha``, ``mla`` or ``mla-sparse``).
        where: A prefix naming the platform (``mi300x: ``).
    """
    return report_platforms_exit(policies, {where: list(decisions)}, model_kind)


def report_platforms_exit(
    policies: PolicySet,
    platforms: Mapping[str, list[tuple[str, Decision]]],
    model_kind: str,
) -> int:
    """:func:`report_exit` over several platforms (``matrix``): a line said alike for several
    is said once, naming them (``mi250x, mi300x: ...``), not once per platform."""
    alike: dict[tuple[bool, str | None, str, str], list[str]] = {}
    for where, decisions in platforms.items():
        for key in _alike(policies, decisions, model_kind):
            alike.setdefault(key, []).append(where.removesuffix(": "))
    for (counts, scope, what, names), wheres in alike.items():
        prefix = f"{', '.join(w for w in wheres if w)}: " if any(wheres) else ""
        verb = "are errors" if ", " in names else "is an error"
        if counts:
            for_whom = f" for {scope} models" if scope else ""
            print(f"kernelpolicy: exit 1: {prefix}{names} {verb}{for_whom} ({what})",
                  file=sys.stderr)  # fmt: skip
        else:
            print(f"kernelpolicy: note: {prefix}{names} {verb} for {scope} models only "
                  f"({what}); not counted in the exit status (--model-kind {scope} counts it)",
                  file=sys.stderr)  # fmt: skip
    return 1 if any(key[0] for key in alike) else 0


def _alike(
    policies: PolicySet, decisions: Iterable[tuple[str, Decision]], model_kind: str
) -> list[tuple[bool, str | None, str, str]]:
    """(counted, model kind, error code, feature names) for each group of errors that fail
    alike on one platform."""
    groups: dict[tuple[bool, str | None, str], list[str]] = {}
    for feature, decision in decisions:
        if decision.error is None:
            continue
        what = decision.error_code.value if decision.error_code else "error"
        key = (counted(policies, feature, model_kind), scope_of(policies, feature), what)
        groups.setdefault(key, []).append(feature)
    return [(*key, ", ".join(features)) for key, features in groups.items()]


def scoped_errors(policies: PolicySet, decisions: Mapping[str, Decision]) -> dict[str, str]:
    """Feature -> its model kind, for each error that holds only for one kind of model."""
    return {
        f: scope
        for f, d in decisions.items()
        if d.error is not None and (scope := scope_of(policies, f)) is not None
    }
