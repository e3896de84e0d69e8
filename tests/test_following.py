"""A Resolution kept current in a long-lived process (``kernelpolicy.following``): with the
real ``resolve()`` and the stamps the vLLM plugin watches (the policy files, the node's halts
file), a ``[[disable]]`` file, a halt, a bad edit and nothing at all, each a named case."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.api import resolve
from kernelpolicy.following import Following, changed_features
from kernelpolicy.policy.files import policy_stamp
from kernelpolicy.server.halts_file import file_stamp, write_halts
from tests.helpers import fixture

POLICY = """schema = "kernelpolicy.policy/v1"
[features."sampler.greedy"]
description = "greedy"
fallback = "torch"
[[features."sampler.greedy".candidates]]
impl = "mine"
entry = "kernelpolicy.kernels.torch_sampling:greedy"
[[features."sampler.greedy".candidates]]
impl = "torch"
"""
DISABLE = """schema = "kernelpolicy.policy/v1"
[[disable]]
feature = "sampler.greedy"
impl = "mine"
reason = "incident 7"
"""


@dataclass
class Node:
    """A policy directory and a daemon socket's directory, and a Following over them."""

    policies: Path
    run: Path
    events: list[tuple[str, Any]]
    resolves: list[int]
    following: Following

    def impl(self) -> str:
        return str(self.following.current.decision("sampler.greedy").impl)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    policies, run = tmp_path / "policies", tmp_path / "run"
    policies.mkdir()
    run.mkdir(mode=0o700)
    (policies / "greedy.toml").write_text(POLICY)
    env = {"KERNELPOLICY_SOCKET": f"unix:{run}/kp.sock", "KERNELPOLICY_LOG_FORMAT": "off"}
    events: list[tuple[str, Any]] = []
    resolves: list[int] = []

    def again() -> Any:
        resolves.append(1)
        return resolve(fixture("cpu"), env=env, policies=[policies], node_halts=True)

    following = Following(
        again, lambda: (file_stamp(run / "kp.halts.json"), policy_stamp([policies])),
        changed=lambda old, new: events.append(("changed", changed_features(old, new))),
        failed=lambda message: events.append(("failed", message)),
    )  # fmt: skip
    return Node(policies, run, events, resolves, following)


def _disable(node: Node) -> None:
    (node.policies / "incident.toml").write_text(DISABLE)


def _halt(node: Node) -> None:
    write_halts(node.run / "kp.halts.json", {"sampler.greedy/mine": "its guard repaired 3"})


def _touch_same(node: Node) -> None:
    """The same policy with a comment: a new fingerprint (the policy texts count), the same
    choices."""
    (node.policies / "greedy.toml").write_text(POLICY + "\n# the same policy\n")


def _bad_edit(node: Node) -> None:
    (node.policies / "incident.toml").write_text("schema = 1\n")


@dataclass(frozen=True)
class Case:
    act: Callable[[Node], None]
    changed: bool
    impl: str
    events: list[tuple[str, Any]]
    resolves: int  # after the first


CASES = {
    "nothing-changed": Case(lambda node: None, False, "mine", [], 0),
    "an-operator-disables-it": Case(
        _disable, True, "torch", [("changed", {"sampler.greedy": ("mine", "torch")})], 1
    ),
    "the-daemon-halts-it": Case(
        _halt, True, "torch", [("changed", {"sampler.greedy": ("mine", "torch")})], 1
    ),
    "same-choices": Case(_touch_same, True, "mine", [("changed", {})], 1),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_change_is_followed(node: Node, case: Case) -> None:
    assert node.impl() == "mine"
    time.sleep(0.01)  # a later modification time than the first file's, on any filesystem
    case.act(node)
    assert node.following.refresh() is case.changed
    assert node.impl() == case.impl
    assert node.events == case.events
    assert len(node.resolves) == 1 + case.resolves
    assert node.following.refresh() is False  # nothing new: no resolve
    assert len(node.resolves) == 1 + case.resolves


def test_a_bad_edit_keeps_the_decisions_and_is_said_once(node: Node) -> None:
    _bad_edit(node)
    assert node.following.refresh() is False
    assert node.impl() == "mine"
    (node.policies / "incident.toml").write_text("schema = \n")  # another bad edit: said
    node.following.refresh()
    (node.policies / "incident.toml").write_text("schema = \n")  # the same error: not again
    node.following.refresh()
    assert [kind for kind, _ in node.events] == ["failed", "failed"]
    assert "incident.toml" in node.events[0][1]
    (node.policies / "incident.toml").write_text(DISABLE)  # fixed: applied
    assert node.following.refresh() is True
    assert node.impl() == "torch"


def test_the_thread_applies_a_change(node: Node) -> None:
    node.following.start(interval=0.01)
    try:
        _disable(node)
        deadline = time.monotonic() + 30  # a bound on a hang, not a speed check
        while node.following.changes == 0:
            assert time.monotonic() < deadline, "the change was never applied"
            time.sleep(0.01)
        assert node.impl() == "torch"
    finally:
        node.following.stop()


def test_a_forked_child_follows_on_its_own(node: Node) -> None:
    """Threads do not survive a fork: the child starts its own and sees a change."""
    node.following.start(interval=0.01)
    try:
        pid = os.fork()
        if pid == 0:  # the child: a change made here is applied by the child's thread
            code = 1
            try:
                _disable(node)
                deadline = time.monotonic() + 30
                while node.following.changes == 0 and time.monotonic() < deadline:
                    time.sleep(0.01)
                code = 0 if node.impl() == "torch" else 2
            finally:
                os._exit(code)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    finally:
        node.following.stop()
