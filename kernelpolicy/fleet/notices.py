"""What ``diff`` warns about in an inventory: where its counts cannot be what the fleet does.

Each warning has a code from a closed set (:class:`Concern`), the number of nodes concerned,
their names, and a message that says what to do. ``diff`` writes each message on stderr and
puts the warnings in ``--json``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "Concern", "FleetWarning", "disagreement_warning", "evidence_warning", "identity_warnings",
    "label_disagreement_warning", "same_daemon_warning",
]  # fmt: skip

_SHOWN = 3  # names and identities quoted in a message (--json has all the names)


class Concern(enum.Enum):
    """Why a count of ``diff`` may not be what the fleet does."""

    NO_IDENTITY = "no-identity"
    SHARED_IDENTITY = "shared-identity"
    SAME_DAEMON = "same-daemon"
    EVIDENCE_UNKNOWN = "evidence-unknown"
    DAEMON_DISAGREES = "daemon-disagrees"
    LABELS_DISAGREE = "labels-disagree"
    RELOAD_FAILED = "reload-failed"


@dataclass(frozen=True)
class FleetWarning:
    """One concern, the nodes it is about (``nodes`` of them, named in ``names``), and what to
    do, in ``message``."""

    concern: Concern
    nodes: int
    names: tuple[str, ...]
    message: str

    def to_dict(self) -> dict[str, object]:
        return {
            "code": self.concern.value,
            "nodes": self.nodes,
            "node_names": list(self.names),
            "message": self.message,
        }


def _some(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN:,} more" if len(names) > _SHOWN else "")


def _nodes(count: int) -> str:
    return f"{count:,} node{'' if count == 1 else 's'}"


def _of(count: int, total: int) -> str:
    return f"{count:,} of {_nodes(total)}"


def identity_warnings(members: Sequence[tuple[str, str | None]], total: int) -> list[FleetWarning]:
    """Nodes without an identity, and identities several nodes share.

    Args:
        members: (name, identity) of each node, one node per name.
        total: The nodes of the inventory.
    """
    found: list[FleetWarning] = []
    bare = [name for name, identity in members if identity is None]
    if bare:
        found.append(FleetWarning(Concern.NO_IDENTITY, len(bare), tuple(bare), (
            f"{_of(len(bare), total)} {'has' if len(bare) == 1 else 'have'} no identity (no "
            f"machine ID, no GPU UUID: {_some(bare)}): a node without one is in no partial "
            "rollout, so every step leaves these out and 100% takes them all at once; give each "
            "node an /etc/machine-id that the daemon reads, or GPUs whose UUIDs its probe reads"
        )))  # fmt: skip
    by_identity: dict[str, list[str]] = {}
    for name, identity in members:
        if identity is not None:
            by_identity.setdefault(identity, []).append(name)
    shared = sorted(
        (names for names in by_identity.values() if len(names) > 1), key=lambda n: -len(n)
    )
    if shared:
        names = tuple(name for group in shared for name in group)
        largest = "" if len(shared) == 1 else f"the largest by {len(shared[0]):,}: "
        found.append(FleetWarning(Concern.SHARED_IDENTITY, len(names), names, (
            f"{len(shared):,} identit{'y is' if len(shared) == 1 else 'ies are'} shared by "
            f"{_nodes(len(names))} ({largest}{_some(shared[0])}): "
            "nodes of one identity are one node to a rollout, so they take each step together "
            "(a machine ID baked into an image makes the whole fleet one node: no node at "
            "first, then all at once); give each node its own /etc/machine-id (empty it in "
            "the image, so that systemd makes one at first boot)"
        )))  # fmt: skip
    return found


def same_daemon_warning(
    groups: Sequence[Sequence[str]], instances: Mapping[str, str] | None = None
) -> list[FleetWarning]:
    """Addresses that answered for one daemon: one instance (``instances``: address ->
    ``HOST/ID``), or from daemons that publish none, one snapshot, identity and GPU UUIDs
    included."""
    if not groups:
        return []
    extra = sum(len(group) - 1 for group in groups)
    names = tuple(name for group in groups for name in group)
    example = " and ".join(groups[0][:2])
    instance = (instances or {}).get(groups[0][0])
    why = (
        f"one daemon, instance {instance}" if instance is not None
        else "one snapshot, identity and GPU UUIDs included"
    )  # fmt: skip
    return [FleetWarning(Concern.SAME_DAEMON, extra, names, (
        f"{len(names):,} addresses answered for only {len(groups):,} "
        f"node{'' if len(groups) == 1 else 's'} ({example}: {why}), so {_nodes(extra)} too "
        "many are counted; give each daemon once (by its unix socket or by TCP, not both)"
    ))]  # fmt: skip


def evidence_warning(
    unknown: Sequence[str], total: int, candidates: Sequence[str]
) -> list[FleetWarning]:
    """Nodes whose evidence is unknown, where some ``verified = true`` candidate needs it."""
    if not unknown or not candidates:
        return []
    plural = len(candidates) != 1
    return [FleetWarning(Concern.EVIDENCE_UNKNOWN, len(unknown), tuple(unknown), (
        f"the stored evidence of {_of(len(unknown), total)} is unknown "
        f"({_some(unknown)}: a platform snapshot carries none, nor does a daemon whose "
        f"policies read none), so the verified = true candidate{'s' if plural else ''} "
        f"{_some(candidates)} {'are' if plural else 'is'} counted there as not "
        "verified, which a node that passed kernelpolicy verify is not; diff --daemons, or "
        "the labels of 'kubectl get nodes -o json', carry each node's evidence"
    ))]  # fmt: skip


def _disagreeing(found: Sequence[tuple[int, str, str]]) -> tuple[tuple[str, ...], str]:
    """The nodes of ``found`` (inventory index, node, what differs) and the first two as
    examples (``node: what; node: what; ...``)."""
    example = "; ".join(f"{name}: {what}" for _, name, what in found[:2])
    return tuple(name for _, name, _ in found), example + ("; ..." if len(found) > 2 else "")


def disagreement_warning(found: Sequence[tuple[int, str, str]], total: int) -> list[FleetWarning]:
    """Live daemons that answer otherwise than the current policies decide for them: each of
    ``found`` is (inventory index, node, ``feature: daemon X, --policies Y``)."""
    if not found:
        return []
    names, example = _disagreeing(found)
    return [FleetWarning(Concern.DAEMON_DISAGREES, len(names), names, (
        f"{_of(len(names), total)} answer otherwise than --policies decides for them "
        f"({example}): they run other policies (pass the "
        "ones they run as --policies), or resolve with what diff cannot see ('kernelpolicy "
        "explain' there says what; their halts are seen and decided with); their changes are "
        "counted from what --policies decides, not from what they run"
    ))]  # fmt: skip


def label_disagreement_warning(
    found: Sequence[tuple[int, str, str]], total: int
) -> list[FleetWarning]:
    """Nodes whose ``impl.*`` labels say otherwise than the current policies decide for them:
    each of ``found`` is (inventory index, node, ``feature: label X, --policies Y``)."""
    if not found:
        return []
    names, example = _disagreeing(found)
    return [FleetWarning(Concern.LABELS_DISAGREE, len(names), names, (
        f"the labels of {_of(len(names), total)} say otherwise than --policies decides for "
        f"them ({example}): the labels may be stale "
        "(written under other policies, or by daemons whose policies differ from --policies: "
        "pass the ones they run as --policies, or wait for the daemons to relabel), or their "
        "daemons resolve with what the labels do not carry ('kernelpolicy explain' there says "
        "what); their changes are counted from what --policies decides, not from what the "
        "labels say"
    ))]  # fmt: skip


def reload_failed_warning(failing: Sequence[tuple[str, str]], total: int) -> list[FleetWarning]:
    """Live daemons whose last policy reload failed: each of ``failing`` is (address, its
    error, cut and escaped when read); ``total`` the daemons that answered."""
    if not failing:
        return []
    (first, error), more = failing[0], len(failing) - 1
    also = f" and {more:,} more" if more else ""
    daemons = f"{total:,} daemon" + ("" if total == 1 else "s")
    return [FleetWarning(Concern.RELOAD_FAILED, len(failing), tuple(a for a, _ in failing), (
        f"the last policy reload of {len(failing):,} of {daemons} failed ({first}: "
        f"{error}{also}): each resolves with its last good policies until a reload succeeds "
        "(rollout progress says which set that is); fix the policy files on those nodes "
        "('kernelpolicy check' them; 'kernelpolicy status' there shows the error)"
    ))]  # fmt: skip
