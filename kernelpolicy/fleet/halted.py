"""Kernels halted on nodes (``halt_on``), as ``diff`` shows them: which candidate, on how many
nodes and which, by which failure, and whether the new policies keep the halt (the daemon's own
rule, :func:`kernelpolicy.server.halts.halt_survives`: a change of the feature's policy other
than in rollout percents lifts it).

Where they come from depends on the inventory:

* a live daemon sends the halts it resolves with (``Resolve`` with ``include_inputs``), each
  with its reason;
* a labelled Node carries ``halted.<feature>.<impl>=true``, written by its daemon
  (:func:`kernelpolicy.labels.node_labels`), read here as :class:`LabelHalts` (a label carries
  no reason: :data:`LABEL_WHY` stands for it);
* a platform snapshot carries none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kernelpolicy.fleet.labelled import LabelFamily, PerKind
from kernelpolicy.labels import PREFIX, label_name
from kernelpolicy.policy.compiled import PolicySet
from kernelpolicy.server.halts import halt_survives

__all__ = [
    "LABEL_WHY", "HaltedKernel", "HaltsReader", "LabelHalts", "NodeHalts", "halted_kernels",
    "kept_halts",
]  # fmt: skip

LABEL_WHY = "halted on the node, as its halted.* label says (a label carries no reason)"
"""The reason of a halt read from a label (``diff``'s ``halted`` groups nodes by reason)."""
_HALTED = "halted."
# As kernelpolicy writes them: halted.<feature>.<impl> (label_name; an implementation's name
# holds no dot), the value true.
_FAMILY = LabelFamily(
    _HALTED,
    r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+",
    lambda value: value == "true",
    f"{_HALTED}<feature>.<impl>=true as 'kernelpolicy labels' writes it",
)


@dataclass(frozen=True)
class LabelHalts:
    """The ``halted.*`` labels of one Node (label names without the prefix), each ``true``.

    Which candidate a label names is read against the policies compared (:meth:`halts`): a
    name over 63 characters was cut and ends in a hash, so only the candidates tell it.
    """

    names: tuple[str, ...]

    @classmethod
    def of(
        cls, labels: Mapping[str, str], prefix: str = PREFIX, source: str = "<labels>"
    ) -> LabelHalts:
        """The ``halted.*`` labels of a Node.

        Raises:
            InventoryError: A ``halted.*`` label is not one kernelpolicy writes (a name of
                ``halted.<feature>.<impl>``, the value ``true``), or the node has more of them
                than one feature file holds (``MAX_FEATURE_FILE_BYTES``, where its daemon
                writes them).
        """
        return cls(tuple(name for name, _ in _FAMILY.read(labels, prefix, source)))

    def halts(self, *sets: PolicySet) -> dict[str, str]:
        """``feature/impl`` -> :data:`LABEL_WHY` for each label: the candidate of ``sets``
        whose label it is, or else the name split at its last dot (a candidate the compared
        policies do not have, which decides nothing, as a daemon's halt of one does not)."""
        names = set(self.names)
        found: dict[str, str] = {}
        for policies in sets if names else ():
            for feature, compiled in policies.features.items():
                for candidate in compiled.candidates:
                    name = label_name(f"{_HALTED}{feature}.{candidate.impl}")
                    if name in names:
                        names.discard(name)
                        found[f"{feature}/{candidate.impl}"] = LABEL_WHY
        for name in sorted(names):
            feature, _, impl = name.removeprefix(_HALTED).rpartition(".")
            found[f"{feature}/{impl}"] = LABEL_WHY
        return dict(sorted(found.items()))


NodeHalts = Mapping[str, str] | LabelHalts
"""A node's halts as its inventory has them: ``feature/impl`` -> why (a live daemon's), or its
labels, read against the policies compared (:class:`HaltsReader`)."""


class HaltsReader:
    """The halts (``feature/impl`` -> why) each node's daemon resolves with, for a comparison of
    ``old`` and ``new``: a node's labels are read against both, once per kind of node (nodes of
    a kind share their labels)."""

    def __init__(self, old: PolicySet, new: PolicySet) -> None:
        self._labelled = PerKind[LabelHalts, Mapping[str, str]](lambda found: found.halts(old, new))

    def __call__(self, found: NodeHalts) -> Mapping[str, str]:
        if not isinstance(found, LabelHalts):
            return found
        return self._labelled(found)


def kept_halts(halts: Mapping[str, str], old: PolicySet, new: PolicySet) -> dict[str, str]:
    """The halts (``feature/impl`` -> why) a daemon running ``old`` keeps when it loads ``new``,
    by the daemon's own rule (:func:`~kernelpolicy.server.halts.halt_survives`). A halt of a
    candidate that has no ``halt_on`` under ``old`` is not one that daemon could have made: not
    kept."""
    rules: dict[str, bool] = {}
    kept = {}
    for key, why in halts.items():
        feature, _, impl = key.rpartition("/")
        compiled = old.features.get(feature)
        candidate = compiled.candidate(impl) if compiled is not None else None
        if candidate is None or candidate.spec.halt_on is None:
            continue
        if halt_survives(old, new, feature, impl, rules):
            kept[key] = why
    return kept


@dataclass
class HaltedKernel:
    """One candidate halted on some nodes: ``feature/impl``, the nodes (in inventory order),
    each reason with its nodes, and whether the new policies keep the halt."""

    key: str
    kept: bool
    nodes: list[str] = field(default_factory=list)
    reasons: dict[str, list[str]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        feature, _, impl = self.key.rpartition("/")
        return {
            "feature": feature,
            "impl": impl,
            "nodes": len(self.nodes),
            "node_names": list(self.nodes),
            "kept_by_new_policies": self.kept,
            "reasons": [
                {"why": why, "nodes": len(names), "node_names": names}
                for why, names in self.reasons.items()
            ],
        }


def halted_kernels(
    members: Iterable[tuple[str, Mapping[str, str]]], old: PolicySet, new: PolicySet
) -> list[HaltedKernel]:
    """Each halted candidate of ``members`` (node name, its halts), in the order first seen."""
    found: dict[str, HaltedKernel] = {}
    for name, halts in members:
        kept = kept_halts(halts, old, new)
        for key, why in halts.items():
            kernel = found.setdefault(key, HaltedKernel(key, key in kept))
            kernel.nodes.append(name)
            kernel.reasons.setdefault(why, []).append(name)
    return list(found.values())
