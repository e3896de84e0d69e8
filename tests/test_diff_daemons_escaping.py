"""A hostile daemon (anyone who bound the TCP port first) against ``kernelpolicy diff
--daemons``: the feature, implementation and error names of its decisions are cut and escaped
before diff compares or prints them, in the text and in ``--json`` (review: a fake server
answering a Resolve with feature ``Aaa\\x1b[2J\\x1b]0;owned\\x07\\nFORGED: all nodes agree``
cleared the terminal and forged a line), and a daemon answering more than
``MAX_DAEMON_DECISIONS`` decisions is counted as not answering. The daemon: a real gRPC server
on loopback (tests/hostile_daemon.py) that also answers ``GetPlatform``."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from kernelpolicy.cli import main
from kernelpolicy.limits import MAX_DAEMON_DECISIONS
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb
from tests import hostile_daemon as shared
from tests.helpers import ROOT, fixture
from tests.hostile_daemon import CLEAR, UP_ERASE, FakeDaemon, Honest, serving, shown_safely

honest = shared.honest  # the shared fixture, found here by its name

FORGED = "Aaa\x1b[2J\x1b]0;owned\x07\nFORGED: all nodes agree"
POLICIES = str(ROOT / "policies")
CLEAR_SHOWN = "\\x1b[2J"  # CLEAR as diff shows it


@dataclass
class SnapshotDaemon(FakeDaemon):
    """A fake daemon that also answers GetPlatform, as ``diff --daemons`` asks first."""

    snapshot: str = ""

    def GetPlatform(self, request: Any, context: grpc.ServicerContext) -> Any:
        return pb.PlatformSnapshot(json=self.snapshot)


Change = Callable[[Any], None]  # edits a ResolveResponse's decisions


def _add(**fields: str) -> Change:
    return lambda answer: answer.decisions.add(**fields)


def _impl_of(feature: str, impl: str) -> Change:
    def change(answer: Any) -> None:
        (decision,) = [d for d in answer.decisions if d.feature == feature]
        decision.impl = impl

    return change


def _many(count: int) -> Change:
    def change(answer: Any) -> None:
        for index in range(count - len(answer.decisions)):
            answer.decisions.add(feature=f"f{index}", impl="torch")

    return change


def _diff(address: str, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    code = main(["diff", "--policies", POLICIES, "--against", POLICIES, "--daemons", address,
                 *extra])  # fmt: skip
    out, err = capsys.readouterr()
    return code, out, err


def _daemon(honest: Honest, change: Change) -> SnapshotDaemon:
    answer = honest.resolve_response()
    change(answer)
    return SnapshotDaemon(resolve=answer, snapshot=fixture("h100-sxm").to_json())


HOSTILE = [
    pytest.param(_add(feature=FORGED, impl="flashinfer"),
                 "Aaa\\x1b[2J\\x1b]0;owned\\x07\\nFORGED: all nodes agree: daemon flashinfer",
                 id="feature-clears-and-forges-a-line"),
    pytest.param(_impl_of("sampler.top_k_top_p", f"{UP_ERASE}torch\nFORGED: ok"),
                 "sampler.top_k_top_p: daemon \\x1b[1A\\x1b[2Ktorch\\nFORGED: ok",
                 id="impl-erases-a-line"),
    pytest.param(_add(feature="x.y", impl="", error_code=f"{CLEAR}\nFORGED"),
                 "x.y: daemon error (\\x1b[2J\\nFORGED)", id="error-code-clears"),
    pytest.param(_add(feature=f"{'a' * 100_000}{CLEAR}", impl="torch"),
                 f"{'a' * 200}...(cut, 100004 chars): daemon torch", id="feature-100000-chars"),
    pytest.param(_add(feature="b" * 150 + CLEAR, impl=CLEAR * 80),
                 f"{'b' * 150}{CLEAR_SHOWN}: daemon {CLEAR_SHOWN * 50}...(cut, 320 chars)",
                 id="impl-cut-before-escaped"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "shown"), HOSTILE)
def test_a_daemons_names_are_escaped_in_the_text(
    honest: Honest, capsys: pytest.CaptureFixture[str], change: Change, shown: str
) -> None:
    """The daemon that disagrees is named with its decision shown escaped and cut: every line
    of stdout and stderr holds no control character, and no line the daemon sent starts one."""
    with serving(_daemon(honest, change)) as address:
        code, out, err = _diff(address, capsys)
    assert code == 0, err
    assert shown_safely(out), out
    assert shown_safely(err), err
    assert not any(line.startswith("FORGED") for line in (out + err).splitlines())
    assert shown in err


@pytest.mark.parametrize(("change", "shown"), HOSTILE)
def test_a_daemons_names_are_escaped_in_the_json(
    honest: Honest, capsys: pytest.CaptureFixture[str], change: Change, shown: str
) -> None:
    """``--json``'s daemon-disagrees warning carries the same escaped words: no string in the
    document holds a control character, whatever reads it."""
    with serving(_daemon(honest, change)) as address:
        code, out, err = _diff(address, capsys, "--json")
    assert code == 0, err
    document = json.loads(out)
    (warning,) = [w for w in document["warnings"] if w["code"] == "daemon-disagrees"]
    assert shown in warning["message"]
    assert all(shown_safely(text) for text in _strings(document)), out


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return [value] if isinstance(value, str) else []


@pytest.mark.parametrize(
    ("count", "code"),
    [
        pytest.param(MAX_DAEMON_DECISIONS, 0, id="at-the-limit-compared"),
        pytest.param(MAX_DAEMON_DECISIONS + 1, 2, id="one-over-counted-as-not-answering"),
    ],
)
def test_a_daemon_answering_too_many_decisions_is_not_counted(
    honest: Honest, capsys: pytest.CaptureFixture[str], count: int, code: int
) -> None:
    """At MAX_DAEMON_DECISIONS the daemon is compared; past it, it is named as not answering,
    with the limit, and (the only daemon) diff exits 2."""
    with serving(_daemon(honest, _many(count))) as address:
        status, _, err = _diff(address, capsys)
    assert status == code, err
    said = f"{address}: {count:,} decisions, over MAX_DAEMON_DECISIONS"
    assert (said in err) is (code == 2), err
