"""What a policy change does to a fleet: per class of identical nodes, every decision and every
engine setting that changes, and how many nodes each change reaches.

Nodes are deduplicated first: a class is everything a decision can read (vendor, devices
without their UUIDs and bus addresses, driver, torch, libraries, environment, the node's stored
evidence where the inventory has it), and within a class the nodes differ only in their
rollout cohorts. Each (class, cohorts) group is resolved
once per policy set, so 10,000 nodes of a dozen kinds cost a few dozen resolutions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from kernelpolicy.digest import sha256
from kernelpolicy.evidence.store import Evidence
from kernelpolicy.fleet.answers import UNSET, Answered, AnswersReader, Said, disagreement
from kernelpolicy.fleet.classes import class_of
from kernelpolicy.fleet.evidence import LabelEvidence, resolve_evidence, verified
from kernelpolicy.fleet.halted import HaltsReader, halted_kernels, kept_halts
from kernelpolicy.fleet.inventory import Node
from kernelpolicy.fleet.notices import (
    FleetWarning,
    disagreement_warning,
    evidence_warning,
    identity_warnings,
    label_disagreement_warning,
    reload_failed_warning,
    same_daemon_warning,
)
from kernelpolicy.fleet.outcomes import (
    ENGINES,
    Group,
    Outcome,
    Resolver,
    disable_rollouts,
    flag_options,
    staged_disables,
)
from kernelpolicy.fleet.result import (
    Change,
    ClassDiff,
    FleetDiff,
    RolloutSteps,
    Running,
    daemons_once,
)
from kernelpolicy.fleet.staging import (
    DEFAULT_STEPS,
    placed_rollouts,
    rollout_of,
    rollouts,
    staged_through,
    with_percent,
)
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy.compiled import PolicySet
from kernelpolicy.policy.rollout import CompiledRollout

__all__ = [
    "ENGINES", "Change", "ClassDiff", "FleetDiff", "RolloutSteps", "diff_fleet", "flag_options",
]  # fmt: skip


def _changes(old: Outcome, new: Outcome) -> list[Change]:
    keys = sorted(set(old) | set(new))
    return [
        Change(kind, name, old.get((kind, name), UNSET), new.get((kind, name), UNSET))
        for kind, name in keys
        if old.get((kind, name), UNSET) != new.get((kind, name), UNSET)
    ]


_Disagreeing = tuple[int, str, str, Said]  # (index, node, what differs, who says it)


@dataclass
class _Fleet:
    """The nodes deduplicated: classes (each with the evidence its nodes decide with), per
    node its class and identity, and the nodes whose evidence is unknown."""

    summaries: list[ClassDiff]
    members: list[tuple[int, str | None, Platform, str]]  # per node: class, identity, it, name
    evidence: list[Evidence | None] = field(default_factory=list)  # per class
    unknown: list[str] = field(default_factory=list)  # nodes whose evidence is unknown
    answered: list[Answered | None] = field(default_factory=list)  # per node
    instances: list[tuple[str, str]] = field(default_factory=list)  # live daemons' starts
    halts: list[tuple[Mapping[str, str], Mapping[str, str]]] = field(default_factory=list)
    # per class: the halts its daemons resolve with now, and those they keep under ``new``

    @classmethod
    def build(cls, nodes: Iterable[Node], old: PolicySet, new: PolicySet) -> _Fleet:
        index: dict[str, int] = {}
        fleet = cls([], [])
        labelled: dict[LabelEvidence, Evidence | None] = {}  # nodes of a kind share their labels
        read_halts = HaltsReader(old, new)  # and their halts
        read_answers = AnswersReader(old, new)  # and their impl.* labels
        features = [*old.features, *new.features]  # forces named by their feature
        switches = old.env_names | new.env_names
        for node in nodes:
            found = node.evidence
            if isinstance(found, LabelEvidence):
                if found not in labelled:
                    labelled[found] = resolve_evidence(found, old, new)
                evidence = labelled[found]
            else:
                evidence = resolve_evidence(found, old, new)
            if evidence is None:
                fleet.unknown.append(node.name)
            halts = read_halts(node.halts)
            key, text = class_of(node.platform, evidence, features, switches, halts)
            number = index.get(key)
            if number is None:
                number = index[key] = len(fleet.summaries)
                digest = sha256(key.encode()).hexdigest()[:10]
                fleet.summaries.append(ClassDiff(digest, text))
                fleet.evidence.append(evidence)
                fleet.halts.append((halts, kept_halts(halts, old, new)))
            fleet.summaries[number].nodes.append(node.name)
            fleet.members.append((number, node.identity, node.platform, node.name))
            fleet.answered.append(read_answers(node.answered))
            if node.instance is not None:
                fleet.instances.append((node.name, node.instance))
        return fleet

    def node_halts(self) -> list[tuple[str, Mapping[str, str]]]:
        """(name, halts) of each node, in inventory order (a class's nodes share its halts)."""
        return [(name, self.halts[number][0]) for number, _, _, name in self.members]

    def disagreeing(self, members: Sequence[int], outcome: Outcome) -> list[_Disagreeing]:
        """(index, node, ``feature: daemon X, --policies Y``, who says it) where a node of
        ``members`` answers, as its live daemon or its ``impl.*`` labels say, otherwise than the
        current policies decide for it (``outcome``); nodes of a kind share their labels' answers,
        checked once."""
        decided = {name: value for (kind, name), value in outcome.items() if kind == "decision"}
        found = []
        checked: dict[int, str | None] = {}  # id of a node's answers -> what differs
        for index in members:
            answered = self.answered[index]
            if answered is None:
                continue
            key = id(answered[0])
            if key not in checked:
                checked[key] = disagreement(answered, decided)
            what = checked[key]
            if what is not None:  # one example a node
                found.append((index, self.members[index][3], what, answered[1]))
        return found

    def outcome(
        self, resolver: Resolver, group: Group, platform: Platform, *, after: bool = False
    ) -> Outcome:
        """What ``resolver`` decides for ``group`` with its class's evidence and halts (those
        kept under the new policies where ``after``)."""
        number = group[0]
        return resolver.outcome(
            group, platform, self.evidence[number], self.halts[number][1 if after else 0]
        )

    def groups(self, placed: Sequence[CompiledRollout]) -> dict[Group, tuple[list[int], Platform]]:
        """(class, cohorts) -> its nodes (indices into ``members``) and one of them as a
        platform, each node placed in every rollout of ``placed``: resolving that node resolves
        the whole group."""
        found: dict[Group, tuple[list[int], Platform]] = {}
        for index, (number, identity, platform, _) in enumerate(self.members):
            group = (number, tuple(r.place(identity)[0] for r in placed))
            if group not in found:
                found[group] = ([], _as_node(platform, identity))
            found[group][0].append(index)
        return found


def _as_node(platform: Platform, identity: str | None) -> Platform:
    """``platform`` as the node of ``identity`` (nodes of one kind may share a platform)."""
    if platform.identity == identity:
        return platform
    return Platform.from_dict({**platform.to_dict(), "machine_id": identity})


def diff_fleet(
    nodes: Iterable[Node],
    old: PolicySet,
    new: PolicySet,
    *,
    steps: Sequence[float] = DEFAULT_STEPS,
    skipped: Sequence[str] = (),
    unreachable: Sequence[str] = (),
    duplicates: Sequence[Sequence[str]] = (),
    running: Sequence[tuple[str, Running]] = (),
) -> FleetDiff:
    """Compare ``old`` and ``new`` over ``nodes``.

    Args:
        nodes: The inventory.
        old: The policies the fleet runs.
        new: The candidate policies.
        steps: Percents at which to count each staged rollout of ``new`` (its own percent is
            always counted).
        skipped: Node names the inventory skipped, reported as such.
        unreachable: Daemons of the inventory that did not answer, reported as such.
        duplicates: Addresses that answered for one node (``Inventory.duplicates``), warned of.
        running: (address, what it says of its policies) of each live daemon that answered
            (``DaemonInventory.running``): which of ``old`` and ``new`` each runs, each daemon
            counted once by its instance (:func:`~kernelpolicy.fleet.result.daemons_once`).
    """
    fleet = _Fleet.build(nodes, old, new)
    tally = _Tally.count(fleet, old, new)
    counted, reachable = _rollout_steps(fleet, tally, old, new, steps)
    total = len(fleet.members)
    unstaged = sorted(
        ((change, len(indices)) for change, indices in tally.unstaged.items()),
        key=lambda item: (-item[1], item[0]),
    )
    unstaged_nodes = {index for indices in tally.unstaged.values() for index in indices}
    daemons = daemons_once(running, dict(fleet.instances), (old.digest, new.digest))
    failing = [(d.address, d.running.error) for d in daemons if d.running.error]
    return FleetDiff(
        total, fleet.summaries, sum(len(c.changed) for c in fleet.summaries),
        counted, tuple(skipped), tuple(unreachable),
        (*_warnings(fleet, old, new, duplicates, reachable),
         *_disagreements(tally.disagree, total), *reload_failed_warning(failing, len(daemons))),
        tuple(fleet.instances), tuple(halted_kernels(fleet.node_halts(), old, new)), daemons,
        tuple(unstaged), tuple(fleet.members[index][3] for index in sorted(unstaged_nodes)),
        (old.digest, new.digest),
    )  # fmt: skip


def _rollout_steps(
    fleet: _Fleet, tally: _Tally, old: PolicySet, new: PolicySet, steps: Sequence[float]
) -> tuple[list[RolloutSteps], set[int]]:
    """Each staged rollout of ``new`` (its candidates', then its disables') counted at
    ``steps``, and the nodes any of them can reach (those it would at 100%)."""
    counted: list[RolloutSteps] = []
    reachable: set[int] = set()
    for feature, impl, rollout in rollouts(new):
        found, reach = _steps(fleet, new, (feature, impl, rollout), steps)
        changed = rollout != rollout_of(old, feature, impl) or (feature, impl) in tally.through
        counted.append(replace(found, changed=changed))
        reachable.update(reach)
    switched, switched_off = disable_rollouts(
        old, new, steps, partial(_choosing, fleet),
        through=tally.through, name=lambda index: fleet.members[index][3],
    )  # fmt: skip
    counted += switched
    reachable.update(switched_off)
    return counted, reachable


@dataclass
class _Tally:
    """What the change does, group by group: the nodes it changes, each (class, change)'s
    nodes, the nodes answering otherwise than ``old`` decides, each change that no rollout
    stages with its nodes, and the staged candidates (feature, impl) some node changes
    through."""

    changed: set[int] = field(default_factory=set)
    reached: dict[tuple[int, Change], list[int]] = field(default_factory=dict)
    disagree: list[_Disagreeing] = field(default_factory=list)
    unstaged: dict[Change, list[int]] = field(default_factory=dict)
    through: set[tuple[str, ...]] = field(default_factory=set)  # + "disable": a staged one's

    @classmethod
    def count(cls, fleet: _Fleet, old: PolicySet, new: PolicySet) -> _Tally:
        """Each group resolved once with ``old`` and once with ``new``; the classes' counts and
        names filled in."""
        before, after = Resolver(old), Resolver(new)
        tally = cls()
        placed = placed_rollouts(old)
        staged = {(f, i): len(placed) + n for n, (f, i, _) in enumerate(rollouts(new))}
        disabled: dict[tuple[str, str], list[int]] = {}
        for n, item in enumerate(staged_disables(new), start=len(placed) + len(staged)):
            disabled.setdefault(item[:2], []).append(n)
        placed += placed_rollouts(new)
        for group, (members, platform) in fleet.groups(placed).items():
            current = fleet.outcome(before, group, platform)
            tally.disagree += fleet.disagreeing(members, current)
            found = _changes(current, fleet.outcome(after, group, platform, after=True))
            cls_diff = fleet.summaries[group[0]]
            for change in found:
                cls_diff.changes[change] = cls_diff.changes.get(change, 0) + len(members)
                tally.reached.setdefault((group[0], change), []).extend(members)
            if found:
                tally.changed.update(members)
            through, loose = staged_through(found, group[1], staged, disabled)
            tally.through |= through
            for change in loose:
                tally.unstaged.setdefault(change, []).extend(members)
        _name_nodes(fleet, tally.changed, tally.reached)
        return tally


def _disagreements(found: list[_Disagreeing], total: int) -> list[FleetWarning]:
    """The daemons, then the labels, that say otherwise than the current policies decide."""
    by_who = {
        said: [(index, name, what) for index, name, what, who in sorted(found) if who is said]
        for said in Said
    }
    return [
        *disagreement_warning(by_who[Said.DAEMON], total),
        *label_disagreement_warning(by_who[Said.LABEL], total),
    ]


def _name_nodes(
    fleet: _Fleet, changed: set[int], reached: dict[tuple[int, Change], list[int]]
) -> None:
    """Each class's changed nodes, and the nodes each of its changes reaches, by name, in
    inventory order."""
    for index in sorted(changed):
        number, _, _, name = fleet.members[index]
        fleet.summaries[number].changed.append(name)
    for (number, change), indices in reached.items():
        names = [fleet.members[index][3] for index in sorted(indices)]
        fleet.summaries[number].reached[change] = names


def _warnings(
    fleet: _Fleet,
    old: PolicySet,
    new: PolicySet,
    duplicates: Sequence[Sequence[str]],
    reachable: set[int],
) -> tuple[FleetWarning, ...]:
    """Where the counts may not be what the fleet does: identities matter only to the nodes a
    staged candidate of ``new`` can reach (``reachable``: those that would run it at 100%),
    evidence only to a ``verified = true`` candidate."""
    total = len(fleet.members)
    found = same_daemon_warning(duplicates, dict(fleet.instances))
    if reachable:
        again = {name for group in duplicates for name in group[1:]}  # counted once here
        members = [
            (name, identity)
            for index, (_, identity, _, name) in enumerate(fleet.members)
            if index in reachable and name not in again
        ]
        found += identity_warnings(members, len(members))
    found += evidence_warning(fleet.unknown, total, verified(old, new))
    return tuple(found)


def _steps(
    fleet: _Fleet,
    policies: PolicySet,
    staged_candidate: tuple[str, str, CompiledRollout],
    steps: Sequence[float],
) -> tuple[RolloutSteps, list[int]]:
    """The nodes that choose the candidate (feature, impl, rollout) at each percent, and
    those that would at 100% (the nodes it can reach)."""
    feature, impl, rollout = staged_candidate
    shown = sorted({*steps, rollout.percent})
    choosing = {
        percent: _choosing(fleet, with_percent(policies, feature, impl, percent), feature, impl)
        for percent in sorted({*shown, 100.0})
    }
    names = tuple(tuple(fleet.members[index][3] for index in choosing[p]) for p in shown)
    counts = tuple((p, len(choosing[p])) for p in shown)
    return RolloutSteps(feature, impl, rollout.percent, counts, names), choosing[100.0]


def _choosing(fleet: _Fleet, staged: PolicySet, feature: str, impl: str) -> list[int]:
    """The nodes (indices into ``fleet.members``, in order) for which ``staged`` decides
    ``impl`` for ``feature``."""
    resolver = Resolver(staged, engines=())
    groups = fleet.groups(placed_rollouts(staged))
    return sorted(
        index
        for group, (members, platform) in groups.items()
        if fleet.outcome(resolver, group, platform, after=True)[("decision", feature)] == impl
        for index in members
    )
