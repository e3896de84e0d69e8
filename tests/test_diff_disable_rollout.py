"""kernelpolicy diff and a staged ``[[disable]]``: the nodes of a class are split by the
disable's cohort, its changes are staged (not said to land everywhere at the next reload), and
--steps counts the nodes each step of the disable's percent switches off."""

from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace

import pytest

from kernelpolicy.cli.diff_cmd import render
from kernelpolicy.fleet import Node, diff_fleet
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy import PolicySet, load_policy_text
from kernelpolicy.policy.rollout import Cohort, compile_rollout
from tests.fleet_helpers import staged_policy
from tests.helpers import FIXTURES

H100 = json.loads((FIXTURES / "h100-sxm.json").read_text())
MI300X = json.loads((FIXTURES / "mi300x.json").read_text())


def disable(percent: float | None) -> str:
    rollout = "" if percent is None else f"rollout = {{ percent = {percent} }}\n"
    return f'\n[[disable]]\nfeature = "fleet.attn"\nimpl = "fastnv"\nreason = "bad"\n{rollout}'


def nodes(base: dict[str, object], count: int, prefix: str) -> list[Node]:
    devices = [{k: v for k, v in d.items() if k != "uuid"} for d in base["devices"]]  # type: ignore[attr-defined]
    platform = Platform.from_dict({**base, "devices": devices})
    return [
        Node(f"{prefix}{i}", platform, hashlib.sha256(f"{prefix}{i}".encode()).hexdigest()[:32])
        for i in range(count)
    ]


def in_cohort(fleet: list[Node], percent: float) -> list[str]:
    """The nodes a disable of fleet.attn/fastnv at ``percent`` applies on, by its own hash."""
    rollout = compile_rollout(
        "fleet.attn", "fastnv", SimpleNamespace(percent=percent, salt=""), disable=True
    )
    assert rollout is not None
    return [n.name for n in fleet if rollout.place(n.identity)[0] is Cohort.IN]


def policies(old: str, new: str) -> tuple[PolicySet, PolicySet]:
    return load_policy_text(old, "p.toml"), load_policy_text(new, "p.toml")


@pytest.mark.parametrize(
    ("before", "after", "steps"),
    [
        pytest.param(None, 25, (10, 50, 100), id="new-disable-at-25"),
        pytest.param(10, 50, (25, 100), id="raised-10-to-50"),
        pytest.param(50, 10, (25,), id="lowered-50-to-10"),
        pytest.param(None, 0, (50,), id="at-0-nowhere"),
    ],
)
def test_each_step_counts_the_nodes_switched_off(
    before: float | None, after: float, steps: tuple[float, ...]
) -> None:
    """Each step (and the policy's own percent) counts the nodes whose decision the disable
    moves off fastnv there, named in inventory order; AMD nodes never run it, never counted."""
    fleet = nodes(H100, 40, "n") + nodes(MI300X, 5, "amd")
    old_text = staged_policy(None) + ("" if before is None else disable(before))
    old, new = policies(old_text, staged_policy(None) + disable(after))
    result = diff_fleet(fleet, old, new, steps=steps)
    [staged] = [r for r in result.rollouts if r.disable]
    assert (staged.feature, staged.impl, staged.percent) == ("fleet.attn", "fastnv", after)
    shown = sorted({*steps, after})
    nvidia = fleet[:40]
    assert [p for p, _ in staged.steps] == shown
    assert [list(names) for names in staged.names] == [in_cohort(nvidia, p) for p in shown]
    assert [n for _, n in staged.steps] == [len(in_cohort(nvidia, p)) for p in shown]
    document = result.to_dict()["rollouts"]
    assert [r["disable"] for r in document] == [True]


def test_the_classes_split_by_the_disable_cohort() -> None:
    """One class of 40 identical nodes: the disable's change reaches its cohort only, and is
    staged (no 'lands on all its nodes' line); the text shows the disable's steps."""
    fleet = nodes(H100, 40, "n")
    old, new = policies(staged_policy(None), staged_policy(None) + disable(25))
    result = diff_fleet(fleet, old, new, steps=(10, 100))
    switched = in_cohort(fleet, 25)
    assert 0 < len(switched) < 40
    [cls] = result.classes
    assert list(cls.changed) == switched
    assert not result.unstaged
    text = render(result, "test")
    assert "disable fleet.attn/fastnv at 25% (nodes switched off):" in text
    assert f"  25%: {len(switched)} nodes" in text
    assert "  100%: 40 nodes" in text


def test_an_unstaged_disable_lands_everywhere() -> None:
    """The same disable without a rollout has no steps: its change lands on every node."""
    fleet = nodes(H100, 10, "n")
    old, new = policies(staged_policy(None), staged_policy(None) + disable(None))
    result = diff_fleet(fleet, old, new, steps=(10, 100))
    assert not any(r.disable for r in result.rollouts)
    assert [n for _, n in result.unstaged] == [10]


def test_nodes_leaving_a_lowered_disable_are_staged_through_it() -> None:
    """Lowered from 50% to 10%, the disable gives fastnv back to the nodes that leave its
    cohort: those changes go through the staged disable, none lands everywhere unstaged."""
    fleet = nodes(H100, 40, "n")
    old, new = policies(staged_policy(None) + disable(50), staged_policy(None) + disable(10))
    result = diff_fleet(fleet, old, new)
    back = [n for n in in_cohort(fleet, 50) if n not in in_cohort(fleet, 10)]
    assert back
    assert sorted(name for c in result.classes for name in c.changed) == sorted(back)
    assert (result.unstaged, result.unstaged_nodes) == ((), ())


def test_an_unchanged_staged_disable_is_not_shown_as_changed() -> None:
    """The same staged disable in both sets is a rollout the change leaves as it is."""
    fleet = nodes(H100, 40, "n")
    text = staged_policy(None) + disable(25)
    old, new = policies(text, text)
    [staged] = [r for r in diff_fleet(fleet, old, new).rollouts if r.disable]
    assert staged.changed is False
