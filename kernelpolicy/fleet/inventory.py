"""A fleet's inventory as operators have it: platform snapshots, or Kubernetes Node objects.

Three shapes are read (each bounded before a JSON parser sees it):

* a directory of ``kernelpolicy probe --json`` snapshots (``*.json``, one node each; the file
  name without ``.json`` is the node's name);
* one snapshot file;
* the output of ``kubectl get nodes -o json`` (a ``List`` or ``NodeList``): each node's
  platform is rebuilt from the labels ``kernelpolicy labels`` wrote
  (:mod:`kernelpolicy.labels`), its identity from the ``node.identity`` label: a labelled node
  without one had none where it was probed, and is in no partial rollout there, whatever its
  ``status.nodeInfo.machineID``; its evidence from the ``verified.*`` labels
  (:class:`~kernelpolicy.fleet.evidence.LabelEvidence`); its halts from the ``halted.*``
  labels (:class:`~kernelpolicy.fleet.halted.LabelHalts`); what its daemon decided from the
  ``impl.*`` labels (:class:`~kernelpolicy.fleet.answers.LabelAnswers`), which ``diff`` checks
  against the current policies. Nodes without kernelpolicy's labels are skipped and counted.
  A node's name must be a DNS-1123 subdomain, as the API server's are (diff prints it).

A snapshot carries no evidence: such a node's is unknown (``Node.evidence`` is ``None``).

A bad snapshot is one :class:`~kernelpolicy.errors.PlatformFileError` naming its file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelpolicy.encoding import escaped
from kernelpolicy.errors import InventoryError, PlatformFileError
from kernelpolicy.fleet.answers import LabelAnswers, NodeAnswers
from kernelpolicy.fleet.evidence import LabelEvidence, NodeEvidence
from kernelpolicy.fleet.halted import LabelHalts, NodeHalts
from kernelpolicy.labels import PREFIX, version_of_value
from kernelpolicy.limits import (
    MAX_INVENTORY_FILE_BYTES,
    MAX_INVENTORY_NODES,
    MAX_PLATFORM_FILE_BYTES,
    MAX_PROBED_DEVICES,
    shown,
)
from kernelpolicy.platform.identity import is_app_specific_id
from kernelpolicy.platform.model import SCHEMA, Platform, load_platform
from kernelpolicy.safeio import decode_utf8, parse_json, read_bytes_bounded

__all__ = ["Inventory", "Node", "load_inventory", "platform_from_labels"]

_IDENTITY_LABEL = f"{PREFIX}/node.identity"
# Kubernetes' IsDNS1123Subdomain, which the API server checks every Node's name with: the
# names printed in diff's lines and warnings come from here, so none holds a control character.
_NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NODE_NAME_CHARS = 253
_Kind = tuple[Platform, LabelEvidence, LabelHalts, LabelAnswers]  # what a kind's labels say


@dataclass(frozen=True)
class Node:
    """One node of the inventory: its name, what it is, and its identity.

    Nodes of one kind may share one ``platform`` (its ``machine_id`` then unset); ``identity``
    is the node's own (what its rollout cohorts are hashed from); ``evidence`` is what its
    ``verified = true`` candidates are decided with, ``None`` where the inventory does not know;
    ``answered`` is what its daemon decides: a live daemon's answers now (feature ->
    implementation, or ``error (<code>)``), or the ``impl.*`` labels of a Node
    (:class:`~kernelpolicy.fleet.answers.LabelAnswers`), for ``diff`` to check against what
    the current policies decide there;
    ``instance`` the live daemon's start (``HOST/ID``, see
    :func:`~kernelpolicy.server.node.daemon_instance`), ``None`` for any other node;
    ``halts`` the candidates its daemon halted on its node: ``feature/impl`` -> why (a live
    daemon's), or the ``halted.*`` labels of a Node, which ``diff`` reads against the policies
    it compares (:class:`~kernelpolicy.fleet.halted.LabelHalts`).
    """

    name: str
    platform: Platform
    identity: str | None
    evidence: NodeEvidence = None
    answered: NodeAnswers = None
    instance: str | None = None
    halts: NodeHalts = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        name: str,
        platform: Platform,
        evidence: NodeEvidence = None,
        answered: Mapping[str, str] | None = None,
        *,
        instance: str | None = None,
        halts: Mapping[str, str] | None = None,
    ) -> Node:
        return cls(
            name, platform, platform.identity, evidence, answered, instance, dict(halts or {})
        )


@dataclass(frozen=True)
class Inventory:
    """The nodes read, where from, the Node objects skipped (no kernelpolicy labels), the
    daemons that did not answer (each message names its address) and the addresses that
    answered for one node (one daemon given twice)."""

    source: str
    nodes: tuple[Node, ...]
    skipped: tuple[str, ...] = ()
    unreachable: tuple[str, ...] = ()
    duplicates: tuple[tuple[str, ...], ...] = ()


def _fail(message: str) -> InventoryError:
    return InventoryError(message)


def load_inventory(path: Path) -> Inventory:
    """The nodes at ``path``: a directory of snapshots, a snapshot, or ``kubectl get nodes``.

    Raises:
        PlatformFileError: A snapshot is bad (the message names its file).
        InventoryError: ``path`` is missing, too large, holds more than
            ``MAX_INVENTORY_NODES`` nodes, or is neither shape.
    """
    if path.is_dir():
        return _snapshot_dir(path)
    data = read_bytes_bounded(
        path, limit=MAX_INVENTORY_FILE_BYTES, limit_name="MAX_INVENTORY_FILE_BYTES", fail=_fail
    )
    value = parse_json(decode_utf8(data, str(path), _fail), str(path), _fail)
    if isinstance(value, dict) and value.get("kind") in ("List", "NodeList"):
        return _kubectl_nodes(value, str(path))
    if isinstance(value, dict) and value.get("schema") == SCHEMA:
        if len(data) > MAX_PLATFORM_FILE_BYTES:
            raise _fail(f"{path}: {len(data)} bytes is over MAX_PLATFORM_FILE_BYTES")
        platform = Platform.from_dict(value, source=str(path))
        return Inventory(str(path), (Node.of(escaped(path.stem), platform),))
    raise _fail(
        f"{path}: expected a directory of 'kernelpolicy probe --json' snapshots, one snapshot, "
        "or the output of 'kubectl get nodes -o json'"
    )


def _snapshot_dir(directory: Path) -> Inventory:
    try:
        with os.scandir(directory) as entries:
            names = []
            for entry in entries:
                if entry.name.endswith(".json") and not entry.name.startswith("."):
                    names.append(entry.name)
                    if len(names) > MAX_INVENTORY_NODES:
                        raise _fail(
                            f"{directory}: more than MAX_INVENTORY_NODES ({MAX_INVENTORY_NODES}) "
                            "snapshots"
                        )
    except OSError as exc:
        raise _fail(f"{directory}: cannot list: {exc.strerror or exc}") from None
    if not names:
        raise _fail(f"{directory}: no *.json snapshots ('kernelpolicy probe --json > NODE.json')")
    nodes = tuple(
        Node.of(escaped(name.removesuffix(".json")), load_platform(directory / name))
        for name in sorted(names)
    )
    return Inventory(str(directory), nodes)


def _kubectl_nodes(value: Mapping[str, Any], source: str) -> Inventory:
    items = value.get("items")
    if not isinstance(items, list):
        raise _fail(f"{source}: a {value.get('kind')} without a list of 'items'")
    if len(items) > MAX_INVENTORY_NODES:
        raise _fail(f"{source}: {len(items)} nodes is over MAX_INVENTORY_NODES")
    nodes: list[Node] = []
    skipped: list[str] = []
    # One Platform, LabelEvidence and LabelHalts per label set (identity aside): nodes of a
    # kind share them.
    kinds: dict[tuple[tuple[str, str], ...], _Kind | None] = {}
    for index, item in enumerate(items):
        name, labels = _node_parts(item, f"{source}: items[{index}]")
        identity = labels.get(_IDENTITY_LABEL, "")
        key = tuple(sorted((k, v) for k, v in labels.items() if k != _IDENTITY_LABEL))
        if key not in kinds:
            kinds[key] = _kind(dict(key), f"{source}: items[{index}] ({name})")
        kind = kinds[key]
        if kind is None:
            skipped.append(name)
            continue
        # As its daemon decided: the label is the identity the probe found, none without it.
        platform, evidence, halts, answers = kind
        node_identity = identity if is_app_specific_id(identity) else None
        nodes.append(Node(name, platform, node_identity, evidence, answers, halts=halts))
    return Inventory(source, tuple(nodes), tuple(skipped))


def _kind(labels: Mapping[str, str], source: str) -> _Kind | None:
    """What the labels of a kind of node say: its platform, evidence, halts and decisions
    (``None``: no kernelpolicy labels; its ``verified.*``, ``dtypes.*``, ``halted.*`` and
    ``impl.*`` labels are checked all the same)."""
    platform = platform_from_labels(labels, source=source)
    evidence = LabelEvidence.of(labels, source=source)
    halts = LabelHalts.of(labels, source=source)
    answers = LabelAnswers.of(labels, source=source)
    return None if platform is None else (platform, evidence, halts, answers)


def _node_parts(item: object, where: str) -> tuple[str, dict[str, str]]:
    """A Node object's name and labels."""
    metadata = item.get("metadata") if isinstance(item, dict) else None
    if not isinstance(metadata, dict):
        raise _fail(f"{where}: not a Node object (no metadata)")
    name = metadata.get("name")
    if not name:
        name = where
    elif not (
        isinstance(name, str) and len(name) <= _NODE_NAME_CHARS and _NODE_NAME.fullmatch(name)
    ):
        raise _fail(
            f"{where}: node name {shown(str(name), 80)!r} is not a DNS-1123 subdomain (lower-case "
            f"letters, digits, '-' and '.', at most {_NODE_NAME_CHARS} characters), which every "
            "Node that Kubernetes serves is named"
        )
    labels = metadata.get("labels") or {}
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise _fail(f"{where} ({name}): labels are not a map of strings")
    return name, labels


def platform_from_labels(
    labels: Mapping[str, str],
    *,
    prefix: str = PREFIX,
    source: str = "<labels>",
) -> Platform | None:
    """The platform a node's kernelpolicy labels describe (every fact a decision reads), or
    ``None`` when it has none.

    Args:
        labels: The Node's labels.
        prefix: The label prefix ``kernelpolicy labels`` wrote with.
        source: Names the node in errors.

    Raises:
        PlatformFileError: The labels describe no valid platform.
    """
    start = f"{prefix}/"
    facts = {k[len(start) :]: v for k, v in labels.items() if k.startswith(start)}
    if "gpu.vendor" not in facts:
        return None
    identity = facts.get("node.identity", "")
    fields: dict[str, Any] = {
        "vendor": facts["gpu.vendor"],
        "devices": _devices(facts, source),
        "driver": {k: facts.get(f"driver.{k}") for k in ("version", "cuda", "rocm")},
        "torch": {"version": _version(facts.get("torch.version"))},
        "libraries": {k[4:]: _version(v) for k, v in facts.items() if k.startswith("lib.")},
        "env": {k[4:]: v for k, v in facts.items() if k.startswith("env.")},
        "machine_id": identity if is_app_specific_id(identity) else None,
    }
    return Platform.from_dict(fields, source=source)


def _devices(facts: Mapping[str, str], source: str) -> list[dict[str, Any]]:
    count = _count(
        facts.get("gpu.count", "0"), "gpu.count", source, MAX_PROBED_DEVICES, "MAX_PROBED_DEVICES"
    )
    if "gpu.arch" not in facts:
        return []
    units = facts.get("gpu.compute_units")
    device = {
        "name": facts.get("gpu.product", ""),
        "arch": facts["gpu.arch"],
        "capability": facts.get("gpu.capability", ""),
        "compute_units": _count(units, "gpu.compute_units", source, _MOST_UNITS) if units else None,
    }
    return [{"index": i, **device} for i in range(count)]


_MOST_UNITS = 10**6  # SMs or CUs of one device: 132 on an H100, 304 on an MI300X


def _count(text: str, key: str, source: str, most: int, most_name: str = "") -> int:
    """The value ``text`` of label ``key`` as an integer 0..``most``. Only ASCII digits, no
    more of them than ``most`` has, reach ``int()``: ``'²'.isdigit()`` holds and 5,000 digits
    are over Python's conversion limit, and either was a ValueError naming no node or label.

    Raises:
        PlatformFileError: Naming the node, the label and what was expected.
    """
    digits = text.isascii() and text.isdigit() and len(text.lstrip("0")) <= len(str(most))
    if not digits or int(text) > most:
        bound = f"{most_name} ({most})" if most_name else str(most)
        raise PlatformFileError(
            f"{source}: label {key}={shown(text)!r}: expected an integer 0..{bound}"
        )
    return int(text)


def _version(value: str | None) -> str | None:
    """A version as written before a label made its ``+`` a ``-`` (see
    :func:`~kernelpolicy.labels.version_value`)."""
    return None if value is None else version_of_value(value)
