"""What ``diff`` finds, as values: each change, each class of nodes and what the change does to
it, each staged rollout's steps, the changes no rollout stages, which policies each live daemon
runs, and the whole comparison, whose :meth:`FleetDiff.to_dict` is ``diff --json``. Computed in
:mod:`kernelpolicy.fleet.diff`; rendered as text by the CLI."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from kernelpolicy.fleet.halted import HaltedKernel
from kernelpolicy.fleet.notices import FleetWarning

__all__ = [
    "Change", "ClassDiff", "DaemonPolicies", "FleetDiff", "RolloutSteps", "Running", "Runs",
    "daemons_once",
]  # fmt: skip


@dataclass(frozen=True, order=True)
class Change:
    """One thing that differs: a feature's decision, an engine's variable or its flags."""

    kind: str  # "decision", "vllm env", "vllm flag", "sglang env", "sglang flag"
    name: str  # the feature, variable or option
    old: str
    new: str

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "name": self.name, "old": self.old, "new": self.new}


@dataclass
class ClassDiff:
    """One class of identical nodes and what the change does to them.

    Attributes:
        key: A short hash of the class.
        summary: The class in words (vendor, arch, GPU count, versions).
        nodes: The node names of the class.
        changes: Each change and the number of the class's nodes it reaches.
        changed: The names of the class's nodes that some change reaches, in inventory order.
        reached: Each change and the names of the class's nodes it reaches, in inventory order.
    """

    key: str
    summary: str
    nodes: list[str] = field(default_factory=list)
    changes: dict[Change, int] = field(default_factory=dict)
    changed: list[str] = field(default_factory=list)
    reached: dict[Change, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class RolloutSteps:
    """A staged rollout of the new policies and how many nodes would run it at each step.

    Attributes:
        steps: (percent, nodes choosing ``impl`` there), percents ascending.
        names: The names of those nodes at each step, in inventory order (as ``steps``).
        changed: Whether the change touches this rollout: its candidate's rollout differs
            from the current policies' (or they have none), or some node changes through it.
        disable: The rollout of a staged ``[[disable]]`` of the candidate: ``steps`` count
            the nodes it switches off (that run ``impl`` where it applies nowhere).
    """

    feature: str
    impl: str
    percent: float
    steps: tuple[tuple[float, int], ...]
    names: tuple[tuple[str, ...], ...] = ()
    changed: bool = True
    disable: bool = False

    def joining(self) -> list[list[str]]:
        """Per step, the nodes that run ``impl`` there and did not at the step before."""
        found: list[list[str]] = []
        before: set[str] = set()
        for names in self.names:
            found.append([name for name in names if name not in before])
            before = set(names)
        return found


class Runs(enum.Enum):
    """Which of the compared policy sets a live daemon resolves with, by the digest of the
    policy texts it sends (``PolicySet.digest`` of them)."""

    POLICIES = "policies"  # the set given as --policies
    AGAINST = "against"  # the set given as --against
    BOTH = "both"  # --policies and --against are one set, and the daemon runs it
    OTHER = "other"

    @classmethod
    def of(cls, digest: str, policies: str, against: str) -> Runs:
        """Which set a daemon of policy ``digest`` runs, of the sets of digests ``policies``
        (``--policies``) and ``against`` (``--against``)."""
        if digest == policies:
            return cls.BOTH if digest == against else cls.POLICIES
        return cls.AGAINST if digest == against else cls.OTHER


@dataclass(frozen=True)
class Running:
    """What a live daemon says of its policies: the digest of the texts it resolves with, and
    its last reload's error (cut and escaped; ``None`` where that reload loaded). A daemon
    whose reload failed resolves with its last good policies, whose digest this is."""

    digest: str
    error: str | None = None


@dataclass(frozen=True)
class DaemonPolicies:
    """One live daemon (by its first address), what it says of its policies, which set it
    runs, and every address that answered for it (``addresses``; the first is ``address``)."""

    address: str
    running: Running
    runs: Runs
    addresses: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "address": self.address,
            "addresses": list(self.addresses or (self.address,)),
            "runs": self.runs.value,
            "policy_digest": self.running.digest,
            "reload_error": self.running.error,
        }


def daemons_once(
    running: Sequence[tuple[str, Running]],
    instances: Mapping[str, str],
    digests: tuple[str, str],
) -> tuple[DaemonPolicies, ...]:
    """Each live daemon once, in inventory order: the addresses of one instance (``instances``:
    address -> ``HOST/ID``, the ID each daemon draws at its start) are one daemon, said by the
    first to answer; an address without an instance (a daemon of before) is a daemon of its
    own. Never grouped by host or snapshot: two daemons of one host, or of one ``--platform``
    file, are two. ``digests``: those of ``--policies`` and ``--against``."""
    found: dict[tuple[str, str], tuple[str, Running, list[str]]] = {}
    for address, said in running:
        instance = instances.get(address)
        key = ("address", address) if instance is None else ("instance", instance)
        found.setdefault(key, (address, said, []))[2].append(address)
    return tuple(
        DaemonPolicies(address, said, Runs.of(said.digest, *digests), tuple(addresses))
        for address, said, addresses in found.values()
    )


@dataclass
class FleetDiff:
    """The whole comparison; :meth:`to_dict` is ``diff --json``."""

    nodes: int
    classes: list[ClassDiff]
    changed_nodes: int
    rollouts: list[RolloutSteps]
    skipped: tuple[str, ...] = ()
    unreachable: tuple[str, ...] = ()  # daemons that did not answer, each message names it
    warnings: tuple[FleetWarning, ...] = ()  # where the counts may not be what the fleet does
    instances: tuple[tuple[str, str], ...] = ()  # (address, HOST/ID) of each live daemon
    halted: tuple[HaltedKernel, ...] = ()  # kernels the live daemons halted, and where
    daemon_policies: tuple[DaemonPolicies, ...] = ()  # live daemons only, in inventory order
    unstaged: tuple[tuple[Change, int], ...] = ()  # changes no rollout stages, most nodes first
    unstaged_nodes: tuple[str, ...] = ()  # the nodes they reach, in inventory order
    digests: tuple[str, str] = ("", "")  # PolicySet.digest of --policies and of --against

    def daemons(self) -> dict[str, list[str]]:
        """Each live daemon instance (``HOST/ID``) -> the addresses that answered for it, in
        inventory order."""
        found: dict[str, list[str]] = {}
        for address, instance in self.instances:
            found.setdefault(instance, []).append(address)
        return found

    def hosts(self) -> dict[str, list[str]]:
        """Each host of the live daemons -> its daemons, each by its first address, in
        inventory order (one daemon given by two addresses is one)."""
        found: dict[str, list[str]] = {}
        for instance, addresses in self.daemons().items():
            found.setdefault(instance.rsplit("/", 1)[0], []).append(addresses[0])
        return found

    @property
    def changed(self) -> bool:
        return self.changed_nodes > 0

    def totals(self) -> list[tuple[Change, int]]:
        """Every change and the nodes it reaches in the whole fleet, most nodes first."""
        counts: dict[Change, int] = {}
        for cls in self.classes:
            for change, count in cls.changes.items():
                counts[change] = counts.get(change, 0) + count
        return sorted(counts.items(), key=lambda item: (-item[1], item[0]))

    def reached(self) -> dict[Change, list[str]]:
        """Each change and the names of the nodes it reaches, class by class."""
        names: dict[Change, list[str]] = {}
        for cls in self.classes:
            for change, reached in cls.reached.items():
                names.setdefault(change, []).extend(reached)
        return names

    def progress(self) -> dict[str, object] | None:
        """How far the live daemons are, each counted once however many of its addresses
        answered (``daemon_policies``): how many answered, how many run ``--policies``,
        ``--against`` (a daemon of one set given as both counts in both), other policies, how
        many failed their last reload, and the two sets' digests; ``None`` without live
        daemons."""
        if not self.daemon_policies:
            return None
        runs = [d.runs for d in self.daemon_policies]
        return {
            "daemons": len(runs),
            "policies": sum(r in (Runs.POLICIES, Runs.BOTH) for r in runs),
            "against": sum(r in (Runs.AGAINST, Runs.BOTH) for r in runs),
            "other": runs.count(Runs.OTHER),
            "failing": sum(d.running.error is not None for d in self.daemon_policies),
            "policies_digest": self.digests[0],
            "against_digest": self.digests[1],
        }

    def to_dict(self) -> dict[str, object]:
        share, reached, totals = _share(self.nodes), self.reached(), self.totals()
        return {
            "nodes": self.nodes,
            "changed_nodes": self.changed_nodes,
            "skipped_nodes": list(self.skipped),
            "unreachable_daemons": list(self.unreachable),
            "daemons": [
                dict(zip(("address", "host", "instance"), (a, *i.rsplit("/", 1)), strict=True))
                for a, i in self.instances
            ],
            "policy_progress": self.progress(),
            "daemon_policies": [d.to_dict() for d in self.daemon_policies],
            "warnings": [w.to_dict() for w in self.warnings],
            "halted": [h.to_dict() for h in self.halted],
            "changes": [{**c.to_dict(), "nodes": n, "share": share(n)} for c, n in totals],
            "nodes_by_change": [{**c.to_dict(), "node_names": reached[c]} for c, _ in totals],
            "classes": [_class_dict(cls) for cls in self.classes],
            "rollouts": [_rollout_dict(r, share) for r in self.rollouts],
            "not_staged": {
                "nodes": len(self.unstaged_nodes),
                "share": share(len(self.unstaged_nodes)),
                "node_names": list(self.unstaged_nodes),
                "changes": [{**c.to_dict(), "nodes": n} for c, n in self.unstaged],
            },
        }


def _rollout_dict(rollout: RolloutSteps, share: Callable[[int], float]) -> dict[str, object]:
    names = rollout.names or tuple(() for _ in rollout.steps)
    return {
        "feature": rollout.feature, "impl": rollout.impl, "percent": rollout.percent,
        "changed": rollout.changed, "disable": rollout.disable,
        "steps": [
            {"percent": p, "nodes": n, "share": share(n), "node_names": list(named)}
            for (p, n), named in zip(rollout.steps, names, strict=True)
        ],
    }  # fmt: skip


def _share(total: int) -> Callable[[int], float]:
    return lambda n: round(n / total, 4) if total else 0.0


def _class_dict(cls: ClassDiff) -> dict[str, object]:
    share = _share(len(cls.nodes))
    return {
        "class": cls.key,
        "summary": cls.summary,
        "nodes": len(cls.nodes),
        "example": (cls.changed or cls.nodes)[0] if cls.nodes else None,
        "changed_nodes": list(cls.changed),
        "changes": [
            {**c.to_dict(), "nodes": n, "share": share(n)} for c, n in sorted(cls.changes.items())
        ],
        "nodes_by_change": [
            {**c.to_dict(), "node_names": cls.reached[c]} for c in sorted(cls.changes)
        ],
    }
