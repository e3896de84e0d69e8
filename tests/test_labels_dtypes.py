"""Node labels carry verify's result per dtype (``dtypes.<feature>.<impl>``), so that a
dtype-routed feature decided from a kubectl node's labels decides as its daemon does: a
candidate verified for some dtypes only stays the choice (routed per dtype) rather than
falling back as a plain ``verified=false`` would make it."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from kernelpolicy.dtypes import DTYPE_NAMES
from kernelpolicy.engine import resolve_policies
from kernelpolicy.errors import InventoryError
from kernelpolicy.evidence.store import Evidence, EvidenceEntry
from kernelpolicy.fleet import diff_fleet, load_inventory
from kernelpolicy.labels import (
    MAX_VALUE_CHARS,
    dtype_results_of_value,
    dtype_results_value,
    is_valid_value,
    node_labels,
)
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy import load_policy_text
from tests.helpers import FIXTURES

POLICY = """
schema = "kernelpolicy.policy/v1"
[features."fleet.sample"]
description = "routed per dtype by verify's results"
fallback = "current"
in_process = false
dtypes = ["float32", "bfloat16", "float16"]
[[features."fleet.sample".candidates]]
impl = "fastv"
vendor = "nvidia"
verified = true
{rollout}[[features."fleet.sample".candidates]]
impl = "current"
"""
OLD, NEW = POLICY.format(rollout="rollout = { percent = 0 }\n"), POLICY.format(rollout="")


def _entry(
    passed: tuple[str, ...], failed: tuple[str, ...], general: bool = False
) -> EvidenceEntry:
    ok = not failed and not general
    return EvidenceEntry(ok, "2026-11-27", "checked", "store", passed, failed, general)


@pytest.mark.parametrize(
    ("entry", "impl"),
    [
        pytest.param(_entry(("bfloat16",), ("float32", "float16")), "fastv",
                     id="passed-bfloat16-only: kept for bfloat16 (verified=false)"),
        pytest.param(_entry(("float32", "bfloat16", "float16"), ()), "fastv", id="passed-all"),
        pytest.param(_entry(("bfloat16",), ("float32",), general=True), "current",
                     id="a-check-naming-no-dtype-failed: falls back"),
        pytest.param(_entry((), ("float32",)), "current", id="passed-no-dtype: falls back"),
    ],
)  # fmt: skip
def test_kubectl_nodes_route_per_dtype_as_their_daemon(
    tmp_path: Path, entry: EvidenceEntry, impl: str
) -> None:
    """The node's daemon (NEW, its store) and diff from the labels it wrote (OLD -> NEW) decide
    the same kernel and the same dtype routes."""
    platform = Platform.from_dict(
        {**json.loads((FIXTURES / "h100-sxm.json").read_text()), "machine_id": "a" * 32}
    )
    evidence = Evidence("k", {("fleet.sample", "fastv"): entry})
    old, new = load_policy_text(OLD), load_policy_text(NEW)
    labels = node_labels(resolve_policies(platform, {}, old, evidence=evidence), evidence)
    path = tmp_path / "nodes.json"
    item = {"kind": "Node", "metadata": {"name": "gpu-1", "labels": labels}}
    path.write_text(json.dumps({"kind": "List", "items": [item]}))
    daemon = resolve_policies(platform, {}, new, evidence=evidence).decision("fleet.sample")
    result = diff_fleet(load_inventory(path).nodes, old, new)
    changed = {c.name: c.new for cls in result.classes for c in cls.changes}
    assert daemon.impl == impl
    assert changed.get("fleet.sample", "current") == impl


_COMBOS = [
    (states, general, convention)
    for states in itertools.product(("-", "", "f", "d", "fd"), repeat=len(DTYPE_NAMES))
    for general in (False, True)
    for convention in (False, True)
]


@pytest.mark.parametrize(("states", "general", "convention"), _COMBOS)
def test_every_result_fits_a_label_and_reads_back(
    states: tuple[str, ...], general: bool, convention: bool
) -> None:
    """Every result per dtype is a valid label value of at most 63 characters that reads back
    as the same result (``-``: the dtype not named)."""
    named = [(d, s) for d, s in zip(DTYPE_NAMES, states, strict=True) if s != "-"]
    passed = tuple(d for d, s in named if "f" not in s)
    failed = tuple(d for d, s in named if "f" in s)
    differ = tuple(d for d, s in named if "d" in s)
    conventions = ("ties",) if convention or differ else ()
    entry = EvidenceEntry(not failed, "", "", "", passed, failed, general, differ, conventions)
    value = dtype_results_value(entry)
    if value is None:
        assert not named
        assert not general
        assert not conventions
        return
    assert len(value) <= MAX_VALUE_CHARS
    assert is_valid_value(value)
    assert dtype_results_of_value(value) == (passed, failed, general, differ, bool(conventions))


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("float64", id="not-a-dtype-verify-names"),
        pytest.param("float32.float32", id="twice"),
        pytest.param("float32-x", id="unknown-state"),
        pytest.param("g.g", id="flag-twice"),
        pytest.param("", id="empty"),
    ],
)  # fmt: skip
def test_a_bad_dtypes_label_is_named(tmp_path: Path, value: str) -> None:
    """A dtypes.* label that kernelpolicy did not write is an InventoryError naming the node."""
    platform = Platform.from_dict(json.loads((FIXTURES / "h100-sxm.json").read_text()))
    labels = node_labels(resolve_policies(platform, {}, load_policy_text(OLD)))
    labels["kernelpolicy.feature.node.kubernetes.io/dtypes.fleet.sample.fastv"] = value
    path = tmp_path / "nodes.json"
    item = {"kind": "Node", "metadata": {"name": "gpu-1", "labels": labels}}
    path.write_text(json.dumps({"kind": "List", "items": [item]}))
    with pytest.raises(InventoryError, match=r"gpu-1.*dtypes\.fleet\.sample\.fastv"):
        load_inventory(path)
