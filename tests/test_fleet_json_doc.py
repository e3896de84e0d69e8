"""docs/fleet.md's table of ``diff --json`` names every key the document has, object by object,
and no key it lacks: a comparison with every list and section filled in (a class, a change, a
rollout step, a halted kernel, a live daemon, a warning, an unstaged change) is walked, and each
object's keys are compared with the table's row for it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from kernelpolicy.fleet.halted import HaltedKernel
from kernelpolicy.fleet.notices import Concern, FleetWarning
from kernelpolicy.fleet.result import (
    Change,
    ClassDiff,
    DaemonPolicies,
    FleetDiff,
    RolloutSteps,
    Running,
    Runs,
)
from tests.helpers import ROOT

_HEADING = "**`--json`, key by key.**"
_ROW = re.compile(r"^\| (the document|`[^`]+`) \| ([^|]+) \|")


def _documented() -> dict[str, set[str]]:
    """Each object path of the table (``""`` for the document) -> the keys its row names."""
    text = (ROOT / "docs/fleet.md").read_text()
    table = text[text.index(_HEADING) :].split("\n\n", 2)[1]
    rows: dict[str, set[str]] = {}
    for line in table.splitlines():
        found = _ROW.match(line)
        if found is not None:
            path = "" if found.group(1) == "the document" else found.group(1).strip("`")
            rows[path] = set(re.findall(r"`([^`]+)`", found.group(2)))
    return rows


def _full() -> dict[str, Any]:
    """``diff --json`` of a comparison with every list and section filled in."""
    change = Change("decision", "sampler.greedy", "aiter", "torch")
    cls = ClassDiff("0123456789", "nvidia sm_90", ["n1"], {change: 1}, ["n1"], {change: ["n1"]})
    daemon = DaemonPolicies("a:1", Running("d" * 16, "bad.toml"), Runs.OTHER, ("a:1", "unix:/s"))
    return FleetDiff(
        nodes=1, classes=[cls], changed_nodes=1,
        rollouts=[RolloutSteps("sampler.greedy", "torch", 50.0, ((50.0, 1),), (("n1",),))],
        skipped=("s1",), unreachable=("b:1: no answer",),
        warnings=(FleetWarning(Concern.RELOAD_FAILED, 1, ("a:1",), "m"),),
        instances=(("a:1", "host/01"),), halted=(HaltedKernel("f/i", True, ["n1"], {"w": ["n1"]}),),
        daemon_policies=(daemon,), unstaged=((change, 1),), unstaged_nodes=("n1",),
        digests=("a" * 16, "b" * 16),
    ).to_dict()  # fmt: skip


def _objects(value: Any, path: str = "") -> Iterator[tuple[str, set[str]]]:
    """(path, its keys) of each object in ``value``; a list's entries are ``path[]``."""
    if isinstance(value, dict):
        yield path, set(value)
        for key, item in value.items():
            yield from _objects(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for item in value:
            yield from _objects(item, f"{path}[]")


def test_every_key_of_diff_json_is_documented() -> None:
    """Each object of the document has exactly the keys its row of the table names, and the
    table has a row for each object (none for objects the document lacks)."""
    found: dict[str, set[str]] = {}
    for path, keys in _objects(_full()):
        found.setdefault(path, set()).update(keys)
    assert _documented() == found
