"""Each node's stored evidence (what ``kernelpolicy verify`` found) as ``diff`` needs it: what
``verified = true`` candidates are decided with on that node, exactly as its daemon decides
them.

Where it comes from depends on the inventory:

* a live daemon sends the evidence it resolves with (``Resolve`` with ``include_inputs``);
* a labelled Node carries ``verified.<feature>.<impl>=true|false``, written by its daemon from
  the store it read (:func:`kernelpolicy.labels.node_labels`), read here as :class:`LabelEvidence`;
* a platform snapshot carries none: the node's evidence is unknown (``None``), and ``diff``
  says so rather than deciding as if nothing were verified there without a word.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kernelpolicy.encoding import described
from kernelpolicy.errors import InventoryError
from kernelpolicy.evidence.store import Evidence, EvidenceEntry
from kernelpolicy.labels import PREFIX, dtype_results_of_value, label_name
from kernelpolicy.policy.compiled import PolicySet

__all__ = ["LabelEvidence", "NodeEvidence", "evidence_summary", "resolve_evidence", "verified"]

_VERIFIED = "verified."
_DTYPES = "dtypes."  # verify's result per dtype (kernelpolicy.labels.dtype_results_value)


@dataclass(frozen=True)
class LabelEvidence:
    """The ``verified.*`` labels of one Node (name without the prefix -> ``true``/``false``).

    Which feature and implementation a label names is read against the policies compared
    (:meth:`evidence`): a label name joins both with dots, and either may hold dots.
    """

    labels: tuple[tuple[str, str], ...]

    @classmethod
    def of(
        cls, labels: Mapping[str, str], prefix: str = PREFIX, source: str = "<labels>"
    ) -> LabelEvidence:
        """The ``verified.*`` and ``dtypes.*`` labels of a Node.

        Raises:
            InventoryError: A ``dtypes.*`` label is not what :func:`dtype_results_value` writes.
        """
        starts = (f"{prefix}/{_VERIFIED}", f"{prefix}/{_DTYPES}")
        found = sorted((k[len(prefix) + 1 :], v) for k, v in labels.items() if k.startswith(starts))
        for name, value in found:
            if name.startswith(_DTYPES) and dtype_results_of_value(value) is None:
                raise InventoryError(
                    f"{source}: label {prefix}/{name}={described(value, 80)}: expected dtypes "
                    "as kernelpolicy writes them, such as float32.bfloat16-f.g"
                )
        return cls(tuple(found))

    def evidence(self, pairs: Iterable[tuple[str, str]]) -> Evidence:
        """The entries of the (feature, impl) ``pairs`` these labels name."""
        values = dict(self.labels)
        entries: dict[tuple[str, str], EvidenceEntry] = {}
        for feature, impl in pairs:
            name = label_name(f"{_VERIFIED}{feature}.{impl}")
            if name in values:
                passed = values[name] == "true"
                dtypes = values.get(label_name(f"{_DTYPES}{feature}.{impl}"))
                read = dtype_results_of_value(dtypes) if dtypes is not None else None
                p, f, general, differ, conventions = read or ((), (), False, (), False)
                entries[(feature, impl)] = EvidenceEntry(
                    passed, "", "as the node's label says", f"label {PREFIX}/{name}",
                    p, f, general, differ, ("as the node's label says",) if conventions else (),
                )  # fmt: skip
        return Evidence("labels", entries)


NodeEvidence = Evidence | LabelEvidence | None
"""A node's evidence as its inventory has it; ``None``: unknown (a snapshot carries none)."""


def _pairs(*sets: PolicySet) -> list[tuple[str, str]]:
    return sorted({(n, c.impl) for p in sets for n, f in p.features.items() for c in f.candidates})


def verified(*sets: PolicySet) -> list[str]:
    """``feature/impl`` of every ``verified = true`` candidate of ``sets``, sorted: the
    decisions that depend on a node's evidence."""
    return sorted(
        {
            f"{name}/{c.impl}"
            for policies in sets
            for name, feature in policies.features.items()
            for c in feature.candidates
            if c.spec.verified
        }
    )


def resolve_evidence(found: NodeEvidence, old: PolicySet, new: PolicySet) -> Evidence | None:
    """The evidence a node's daemon resolves with, or ``None`` where it is unknown.

    A labelled node's labels are its daemon's store only where the daemon read the store: its
    policies (``old``, the ones the fleet runs) needed evidence. Without, no label is written
    whatever the store holds, so the node's evidence is unknown.
    """
    if isinstance(found, LabelEvidence):
        return found.evidence(_pairs(old, new)) if old.needs_evidence else None
    return found


def evidence_summary(evidence: Evidence | None) -> str:
    """``verified fleet.a/fast; failed verify fleet.b/x``, or ``""`` without entries."""
    if evidence is None:
        return ""
    passed = [f"{f}/{i}" for (f, i), e in sorted(evidence.entries.items()) if e.passed]
    failed = [f"{f}/{i}" for (f, i), e in sorted(evidence.entries.items()) if not e.passed]
    parts = ([f"verified {', '.join(passed)}"] if passed else []) + (
        [f"failed verify {', '.join(failed)}"] if failed else []
    )
    return "; ".join(parts)
