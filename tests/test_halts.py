"""halt_on, piece by piece: the policy key and check's validation, the engine's ``halted``
check, the daemon's account of reports, the report socket's format and the worker's reporter
(bounded with the daemon away)."""

from __future__ import annotations

import json
import os
import socket
import tracemalloc
from pathlib import Path

import pytest

from kernelpolicy.engine import CheckKind, ErrorCode, Reason, resolve_policies
from kernelpolicy.engine.decide import halts_of
from kernelpolicy.errors import PolicyError
from kernelpolicy.labels import PREFIX, node_labels
from kernelpolicy.limits import MAX_REPORT_LINE_BYTES, REPORT_BATCH_EVENTS, REPORT_QUEUE_EVENTS
from kernelpolicy.policy import load_policy_text
from kernelpolicy.server.halts import Halts
from kernelpolicy.server.reporter import Reporter
from kernelpolicy.server.reports import (
    Event,
    EventKind,
    Rejection,
    ReportError,
    encode_events,
    parse_line,
    peer_credentials,
    report_socket_path,
)
from kernelpolicy.server.sockets import report_path
from tests.helpers import fixture

FEATURE = "sampler.greedy"
POLICY = """
schema = "kernelpolicy.policy/v1"
[features."sampler.greedy"]
description = "greedy with a guarded planted kernel"
fallback = "torch"
[[features."sampler.greedy".candidates]]
impl = "planted"
entry = "kernelpolicy.testing.buggy_kernels:greedy_out_of_range"
halt_on = {halt_on}
[[features."sampler.greedy".candidates.known_issues]]
reason = "returns vocab_size for all-NaN rows"
action = "guard"
guard = "clamp_token_ids"
[[features."sampler.greedy".candidates]]
impl = "torch"
"""
HALTED = {f"{FEATURE}/planted": "its output guard repaired 2 output(s) (test)"}


def policy(halt_on: str = "{ guard_trips = 2, runtime_failures = 3 }") -> str:
    return POLICY.replace("{halt_on}", halt_on)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(policy("{ guard_trips = 1 }"), None, id="guard-trips"),
        pytest.param(policy("{ runtime_failures = 5 }"), None, id="runtime-failures"),
        pytest.param(policy(), None, id="both"),
        pytest.param(policy("{}"), "halt_on needs 'guard_trips' or 'runtime_failures'", id="empty"),
        pytest.param(policy("{ guard_trips = 0 }"), "expected at least 1, got", id="zero"),
        pytest.param(policy("{ guard_trips = -2 }"), "at least 1, got the integer", id="negative"),
        pytest.param(policy('{ guard_trips = "1" }'), "an integer, got the str", id="string"),
        pytest.param(policy("{ guard_trips = 1.5 }"), "integer, got the number 1.5", id="float"),
        pytest.param(policy("{ guard_trips = 2000000 }"), "at most 1000000", id="over-max"),
        pytest.param(policy("{ trips = 1 }"), "trips", id="unknown-key"),
        pytest.param(
            policy("{ guard_trips = 1 }").replace('action = "guard"', 'action = "note"'),
            "halt_on.guard_trips on a candidate without an output guard", id="no-guard",
        ),
        pytest.param(
            policy("{ runtime_failures = 1 }").replace(
                'impl = "torch"', 'impl = "torch"\nhalt_on = { runtime_failures = 1 }'
            ),
            "halt_on on the fallback 'torch'", id="on-the-fallback",
        ),
    ],
)  # fmt: skip
def test_check_validates_halt_on(text: str, message: str | None) -> None:
    """A valid halt_on loads; each mistake is one error naming what was expected."""
    if message is None:
        spec = load_policy_text(text).features[FEATURE].candidate("planted")
        assert spec is not None
        assert spec.spec.halt_on is not None
        return
    with pytest.raises(PolicyError, match=message):
        load_policy_text(text)


def test_a_halted_candidate_falls_through_to_the_next() -> None:
    """The engine rejects a halted candidate with a closed 'halted' check, says why and how to
    clear it, warns, and enters the halt in the fingerprint (not its counts)."""
    policies = load_policy_text(policy())
    before = resolve_policies(fixture("cpu"), {}, policies)
    after = resolve_policies(fixture("cpu"), {}, policies, halts=HALTED)
    decision = after.decision(FEATURE)
    assert (before.decision(FEATURE).impl, decision.impl) == ("planted", "torch")
    assert decision.reason is Reason.FALLBACK
    failure = decision.candidates[0].failures[0]
    assert failure.kind is CheckKind.HALTED
    assert failure.message == "halted on this node: its output guard repaired 2 output(s) (test)"
    assert failure.hint is not None
    assert f"kernelpolicy status --clear-halt {FEATURE}" in failure.hint
    assert any("halted on this node" in w for w in decision.warnings)
    assert halts_of(after.decisions) == HALTED
    assert before.fingerprint != after.fingerprint
    other_reason = dict.fromkeys(HALTED, "another reason")
    again = resolve_policies(fixture("cpu"), {}, policies, halts=other_reason)
    assert again.fingerprint == after.fingerprint


@pytest.mark.parametrize(
    ("halts", "env", "impl", "error"),
    [
        pytest.param({}, {}, "planted", None, id="none"),
        pytest.param({"nope/x": "y", f"{FEATURE}/fast": "y"}, {}, "planted", None,
                     id="unknown-pairs-ignored"),
        pytest.param(HALTED, {}, "torch", None, id="halted"),
        pytest.param(HALTED, {"KERNELPOLICY_FORCE_SAMPLER_GREEDY": "planted"}, None,
                     ErrorCode.REQUIRED_UNSUPPORTED, id="forced-halted-is-an-error"),
        pytest.param(HALTED, {"KERNELPOLICY_FORCE_SAMPLER_GREEDY": "torch"}, "torch", None,
                     id="forced-fallback"),
    ],
)  # fmt: skip
def test_halts_in_the_engine(
    halts: dict[str, str], env: dict[str, str], impl: str | None, error: ErrorCode | None
) -> None:
    """Halts name pairs of the policy set; a force of a halted candidate is an error (when in
    doubt, never the risky kernel), with the hint that lifts the halt."""
    resolution = resolve_policies(fixture("cpu"), env, load_policy_text(policy()), halts=halts)
    decision = resolution.decision(FEATURE)
    assert (decision.impl, decision.error_code) == (impl, error)
    if error is not None:
        assert any("--clear-halt" in hint for hint in decision.hints)


def test_labels_say_which_candidate_is_halted() -> None:
    """The node labels carry halted.<feature>.<impl>=true, and the decision's new impl."""
    resolution = resolve_policies(fixture("cpu"), {}, load_policy_text(policy()), halts=HALTED)
    labels = node_labels(resolution)
    assert labels[f"{PREFIX}/halted.sampler.greedy.planted"] == "true"
    assert labels[f"{PREFIX}/impl.sampler.greedy"] == "torch"
    plain = node_labels(resolve_policies(fixture("cpu"), {}, load_policy_text(policy())))
    assert not any("halted." in key for key in plain)


def events(kind: EventKind, count: int, feature: str = FEATURE, impl: str = "planted") -> Event:
    return Event(kind, feature, impl, count, "clamp_token_ids")


@pytest.mark.parametrize(
    ("reported", "halted", "unknown"),
    [
        pytest.param([events(EventKind.GUARD_TRIP, 1)], False, 0, id="under-threshold"),
        pytest.param([events(EventKind.GUARD_TRIP, 2)], True, 0, id="guard-trips"),
        pytest.param([events(EventKind.GUARD_TRIP, 1)] * 2, True, 0, id="adds-up"),
        pytest.param([events(EventKind.RUNTIME_FAILURE, 3)], True, 0, id="runtime-failures"),
        pytest.param([events(EventKind.SERVED, 50)], False, 0, id="served-never-halts"),
        pytest.param([events(EventKind.GUARD_TRIP, 9, impl="torch")], False, 0,
                     id="no-halt-on-no-halt"),
        pytest.param([events(EventKind.GUARD_TRIP, 9, impl="ghost")], False, 1, id="unknown-impl"),
        pytest.param([events(EventKind.GUARD_TRIP, 9, feature="x.y")], False, 1,
                     id="unknown-feature"),
    ],
)  # fmt: skip
def test_the_daemon_counts_and_halts(reported: list[Event], halted: bool, unknown: int) -> None:
    """Thresholds per candidate, from the policy set in use; anything else is refused and
    counted, never a new key."""
    halts = Halts()
    halts.adopt(load_policy_text(policy()))
    newly = halts.record(reported)
    assert (newly == [(FEATURE, "planted")]) is halted
    assert (f"{FEATURE}/planted" in halts.inputs()) is halted
    assert halts.rejected[Rejection.UNKNOWN] == unknown
    assert all(key[0] == FEATURE and key[1] in ("planted", "torch") for key in halts.totals)


def test_clear_and_policy_changes_lift_halts() -> None:
    """clear(feature) lifts the halt and starts counting from zero; an unchanged reload keeps
    it; a change of the feature's policy drops it."""
    halts = Halts()
    halts.adopt(load_policy_text(policy()))
    halts.record([events(EventKind.GUARD_TRIP, 2)])
    assert halts.clear(FEATURE) == ["planted"]
    assert halts.record([events(EventKind.GUARD_TRIP, 1)]) == []  # counts start again
    halts.record([events(EventKind.GUARD_TRIP, 1)])
    assert halts.adopt(load_policy_text(policy())) == halts.inputs() != {}  # same text: kept
    assert halts.adopt(load_policy_text(policy("{ guard_trips = 5 }"))) == {}  # changed: lifted
    assert halts.halts_total == {(FEATURE, "planted"): 2}  # a counter: never down
    with pytest.raises(KeyError):
        halts.clear("no.such")


def rollout(percent: str, **changes: str) -> str:
    """The policy with ``rollout = {percent}`` on the planted candidate (none for ""), then
    each of ``changes`` ("old|new", each old text in the policy) made."""
    text = policy()
    if percent:
        text = text.replace("halt_on = {", f"rollout = {percent}\nhalt_on = {{", 1)
    for change in changes.values():
        before, after = change.split("|")
        assert before in text
        text = text.replace(before, after, 1)
    return text


def aiter(percent: int) -> dict[str, str]:
    """A change adding a third candidate, in a rollout at ``percent``, before the fallback."""
    torch = '[[features."sampler.greedy".candidates]]\nimpl = "torch"'
    added = '[[features."sampler.greedy".candidates]]\nimpl = "aiter"\n'
    return {"aiter": f"{torch}|{added}rollout = {{ percent = {percent} }}\n{torch}"}


@pytest.mark.parametrize(
    ("before", "after", "kept"),
    [
        pytest.param(rollout("{ percent = 10 }"), rollout("{ percent = 25 }"), True, id="raised"),
        pytest.param(rollout("{ percent = 25 }"), rollout("{ percent = 0 }"), True,
                     id="kill-switch"),
        pytest.param(rollout("{ percent = 100 }"), rollout(""), True, id="rollout-done"),
        pytest.param(rollout(""), rollout("{ percent = 5 }"), True, id="rollout-started"),
        pytest.param(rollout("{ percent = 10, salt = 'a' }"),
                     rollout("{ percent = 50, salt = 'a' }"), True, id="raised-with-salt"),
        pytest.param(rollout("{ percent = 10 }", **aiter(5)),
                     rollout("{ percent = 10 }", **aiter(50)), True, id="another-candidate"),
        pytest.param(rollout("{ percent = 10 }"), rollout("{ percent = 10, salt = 'b' }"),
                     False, id="new-salt"),
        pytest.param(rollout("{ percent = 10 }"),
                     rollout("{ percent = 25 }", halt="guard_trips = 2|guard_trips = 3"), False,
                     id="percent-and-threshold"),
        pytest.param(rollout("{ percent = 10 }"),
                     rollout("{ percent = 10 }", entry=":greedy_out_of_range|:greedy_nan"), False,
                     id="entry"),
        pytest.param(rollout("{ percent = 10 }"),
                     rollout("{ percent = 25 }", req='entry =|torch = ">=2.0"\nentry ='), False,
                     id="percent-and-requirement"),
        pytest.param(rollout("{ percent = 10 }"),
                     rollout("{ percent = 10 }", why="all-NaN rows|NaN rows"), False,
                     id="known-issue"),
        pytest.param(rollout("{ percent = 10 }"),
                     rollout("{ percent = 10 }", desc="planted kernel|planted kernel (v2)"),
                     False, id="description"),
    ],
)  # fmt: skip
def test_which_reloads_keep_a_halt(before: str, after: str, kept: bool) -> None:
    """A halt is about the kernel on this node: a change that only moves rollout percents (the
    next step of a staged rollout, the kill switch, the end of one) keeps it; any other change
    of the feature's policy lifts it. halts_total never goes down either way."""
    halts = Halts()
    halts.adopt(load_policy_text(before))
    halts.record([events(EventKind.GUARD_TRIP, 2), events(EventKind.RUNTIME_FAILURE, 1)])
    assert f"{FEATURE}/planted" in halts.inputs()
    assert (f"{FEATURE}/planted" in halts.adopt(load_policy_text(after))) is kept
    assert halts.halts_total == {(FEATURE, "planted"): 1}
    halts.record([events(EventKind.GUARD_TRIP, 3)])  # halts again only where it was lifted
    assert halts.halts_total == {(FEATURE, "planted"): 1 if kept else 2}


def test_halts_total_goes_only_with_its_candidate() -> None:
    """The counter's series stays while its candidate is in the policies (even without
    halt_on), and goes with the candidate."""
    halts = Halts()
    halts.adopt(load_policy_text(policy()))
    halts.record([events(EventKind.GUARD_TRIP, 2)])
    halts.adopt(load_policy_text(policy("{ runtime_failures = 9 }").replace(
        "halt_on = { runtime_failures = 9 }\n", "")))  # fmt: skip
    assert (halts.inputs(), halts.halts_total) == ({}, {(FEATURE, "planted"): 1})
    halts.adopt(load_policy_text(policy().replace('impl = "planted"', 'impl = "renamed"')))
    assert halts.halts_total == {}


GOOD = {"kind": "guard_trip", "feature": FEATURE, "impl": "planted", "count": 2, "detail": "x"}


@pytest.mark.parametrize(
    ("line", "rejection"),
    [
        pytest.param(b"{not json\n", Rejection.MALFORMED, id="not-json"),
        pytest.param(b"\xff\xfe\n", Rejection.MALFORMED, id="not-utf8"),
        pytest.param(b"[]\n", Rejection.MALFORMED, id="not-an-object"),
        pytest.param(b'{"events": [], "clear_halt": "x"}\n', Rejection.MALFORMED, id="two-keys"),
        pytest.param(json.dumps({"events": [{**GOOD, "kind": "exploded"}]}).encode(),
                     Rejection.MALFORMED, id="unknown-kind"),
        pytest.param(json.dumps({"events": [{**GOOD, "count": 0}]}).encode(),
                     Rejection.MALFORMED, id="count-zero"),
        pytest.param(json.dumps({"events": [{**GOOD, "count": True}]}).encode(),
                     Rejection.MALFORMED, id="count-bool"),
        pytest.param(json.dumps({"events": [{**GOOD, "count": 10**10}]}).encode(),
                     Rejection.MALFORMED, id="count-huge"),
        pytest.param(json.dumps({"events": [{**GOOD, "pid": 1}]}).encode(),
                     Rejection.MALFORMED, id="extra-key"),
        pytest.param(json.dumps({"events": [{**GOOD, "detail": "d" * 301}]}).encode(),
                     Rejection.MALFORMED, id="detail-too-long"),
        pytest.param(json.dumps({"events": [GOOD] * (REPORT_BATCH_EVENTS + 1)}).encode(),
                     Rejection.MALFORMED, id="too-many-events"),
        pytest.param(b'{"clear_halt": ""}\n', Rejection.MALFORMED, id="clear-nothing"),
        pytest.param(b" " * (MAX_REPORT_LINE_BYTES + 1), Rejection.TOO_LARGE, id="too-long"),
        pytest.param(b"[" * 40 + b"]" * 40, Rejection.MALFORMED, id="too-deep"),
    ],
)  # fmt: skip
def test_report_lines_are_checked(line: bytes, rejection: Rejection) -> None:
    """Every line that is not a message of the format is refused with its reason."""
    with pytest.raises(ReportError) as caught:
        parse_line(line)
    assert caught.value.rejection is rejection


def test_report_lines_round_trip() -> None:
    """What a worker encodes, the daemon reads back; a clear-halt request names its feature."""
    sent = [events(EventKind.GUARD_TRIP, 2), events(EventKind.RUNTIME_FAILURE, 1)]
    assert parse_line(encode_events(sent)) == sent
    assert parse_line(b'{"clear_halt": "sampler.greedy"}\n') == FEATURE


def test_peer_credentials_of_a_socketpair() -> None:
    """SO_PEERCRED says who is at the other end: here, this process."""
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right:
        assert peer_credentials(left) == (os.getpid(), os.geteuid(), os.getegid())


@pytest.mark.parametrize(
    ("address", "explicit", "expected"),
    [
        pytest.param("127.0.0.1:50151", True, None, id="tcp"),
        pytest.param("unix:/x/kp.sock", True, Path("/x/kp.report.sock"), id="explicit"),
        pytest.param("/x/kp", True, Path("/x/kp.report"), id="bare-path"),
        pytest.param("unix:/nowhere/kp.sock", False, None, id="default-absent"),
    ],
)  # fmt: skip
def test_where_reports_go(address: str, explicit: bool, expected: Path | None) -> None:
    """Only to a unix socket; a socket found by default only where a daemon made one."""
    assert report_path(address, explicit=explicit) == expected
    assert report_socket_path(Path("/r/kernelpolicy.sock")) == Path("/r/kernelpolicy.report.sock")


def test_the_reporter_stays_bounded_with_the_daemon_away(tmp_path: Path) -> None:
    """With nothing at the socket, 100,000 distinct events keep at most REPORT_QUEUE_EVENTS
    queued and as many pending; the rest are dropped and counted; memory stops growing."""
    reporter = Reporter(tmp_path / "absent.report.sock", interval=3600.0)
    tracemalloc.start()
    try:
        for i in range(10_000):
            reporter.report(EventKind.RUNTIME_FAILURE, FEATURE, "planted", detail=f"e{i}")
        assert reporter.flush(10.0) is False  # drained into pending, and not delivered
        small, _ = tracemalloc.get_traced_memory()
        for i in range(100_000):
            reporter.report(EventKind.RUNTIME_FAILURE, FEATURE, "planted", detail=f"f{i}")
        assert reporter.flush(10.0) is False
        large, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(reporter._queue) <= REPORT_QUEUE_EVENTS
    assert len(reporter._pending) == REPORT_QUEUE_EVENTS
    assert reporter.dropped == 110_000 - REPORT_QUEUE_EVENTS
    assert reporter.sent == 0
    assert reporter.send_failures >= 2
    assert large - small < 1024 * 1024  # ten times the events, no more memory held
