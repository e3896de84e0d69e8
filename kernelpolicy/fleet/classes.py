"""Classes of identical nodes: what about a node a decision can read, as a key and in words.

Two nodes of one class differ only in identity (machine ID, GPU UUIDs, bus addresses) and probe
messages, so one resolution decides for both (within one cohort of each staged candidate and
each staged ``[[disable]]``: ``diff`` splits a class by them, see :data:`.outcomes.Group`).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable

from kernelpolicy.encoding import escaped, one_line
from kernelpolicy.engine.switches import FORCE_PREFIX, force_variable
from kernelpolicy.evidence.store import Evidence, EvidenceEntry
from kernelpolicy.fleet.evidence import evidence_summary
from kernelpolicy.platform.model import Platform

__all__ = ["class_key", "class_of", "summary"]

_PER_NODE_KEYS = frozenset({"uuid", "unique_id", "pci_bus_id", "physical_index", "kfd_node"})


def class_key(platform: Platform) -> str:
    """Everything about ``platform`` that a decision can read, as canonical JSON: two nodes of
    one key differ only in identity (machine ID, GPU UUIDs, bus addresses, the daemon instance
    of a saved GetPlatform answer) and probe messages."""
    data = platform.to_dict()
    data.pop("machine_id", None)
    data.pop("probe_errors", None)
    data.pop("daemon", None)  # a saved GetPlatform answer's daemon instance: identity too
    data["devices"] = [
        {k: v for k, v in device.items() if k not in _PER_NODE_KEYS} for device in data["devices"]
    ]
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def summary(
    platform: Platform, features: Iterable[str] = (), switches: Collection[str] = ()
) -> str:
    """``nvidia sm_90 NVIDIA H100 80GB HBM3 x8, driver 570.133.20, torch 2.9.1+cu128``, then
    each force the node decides with (``; forced fleet.attn=current``, by its feature where
    ``features`` has it) and each of ``switches`` (variables the policies read) set there
    (``; VLLM_ROCM_USE_AITER=1``): two classes apart only by an operator's force or switch
    read differently."""
    device = platform.primary
    parts: list[str] = [platform.vendor]
    if device is not None:
        parts.append(f"{device.arch} {device.name} x{len(platform.devices)}")
    text = " ".join(parts)
    if platform.driver.version:
        text += f", driver {platform.driver.version}"
    if platform.torch.version:
        text += f", torch {platform.torch.version}"
    named = {force_variable(feature): feature for feature in features}
    for variable, value in sorted(platform.env.items()):
        # a node's value as it came (an inventory, a daemon's answer): cut and escaped, so
        # that no line break or terminal escape reaches diff's output
        if variable.startswith(FORCE_PREFIX):
            text += f"; forced {named.get(variable, variable)}={one_line(value, 64)}"
        elif variable in switches:
            text += f"; {variable}={one_line(value, 64)}"
    return escaped(text)


def class_of(
    platform: Platform,
    evidence: Evidence | None,
    features: Iterable[str] = (),
    switches: Collection[str] = (),
    halted: Collection[str] = (),
) -> tuple[str, str]:
    """The class key and summary of a node: its platform's, and the evidence it decides with
    where that has entries (evidence without any decides as none, and keeps the key);
    ``features`` and ``switches`` as :func:`summary` takes them; ``halted``: the
    ``feature/impl`` its daemon halted (``; halted sampler.greedy/aiter``)."""
    key, text = class_key(platform), summary(platform, features, switches)
    if halted:
        key += json.dumps(["halted", sorted(halted)])
        text += f"; halted {', '.join(sorted(halted))}"
    if evidence is not None and evidence.entries:
        key += json.dumps(sorted(_decides(f, i, e) for (f, i), e in evidence.entries.items()))
        text += f"; {evidence_summary(evidence)}"
    return key, text


def _decides(feature: str, impl: str, entry: EvidenceEntry) -> list[object]:
    """What a decision reads of an entry (not when it was made, nor its words)."""
    return [
        feature, impl, entry.passed, list(entry.dtypes_passed), list(entry.dtypes_failed),
        entry.general_failed, list(entry.dtypes_differ), list(entry.conventions),
    ]  # fmt: skip
