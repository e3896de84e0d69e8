"""Kernels halted on live daemons' nodes (``halt_on``), as ``diff --daemons`` shows them: which
candidate, on how many nodes and which, by which failure, and whether the new policies keep the
halt (the daemon's own rule, :func:`kernelpolicy.server.halts.halt_survives`: a change of the
feature's policy other than in rollout percents lifts it)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kernelpolicy.policy.compiled import PolicySet
from kernelpolicy.server.halts import halt_survives

__all__ = ["HaltedKernel", "halted_kernels", "kept_halts"]


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
