"""A TCP gRPC call whose request does not arrive within MAX_GRPC_REQUEST_SECONDS is ended
DEADLINE_EXCEEDED naming the limit, and its call slot is freed: a client that sends a call's
headers and part of its message, then nothing, with its connection kept open, holds no slot
for long. Calls whose request is in are answered, and server streams run on.

One real daemon on loopback, spoken to as raw HTTP/2 (tests.h2_calls); every case's call is
opened at once, so the whole module waits for the limit once. The daemon runs with the limit at
LIMIT_SECONDS, where kernelpolicy.limits says 10 s: each case's call is whole or stopped for
good, on the same side of any limit, and each late call's detail names the limit it ran with.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from kernelpolicy.limits import MAX_GRPC_CALLS_PER_PEER, MAX_TCP_REQUEST_BYTES
from kernelpolicy.server import peer_calls, peers
from kernelpolicy.testing.daemon import running_daemon
from tests.h2_calls import EMPTY, RESOLVE, WATCH, H2Calls, half_sent
from tests.helpers import ROOT, fixture

pytestmark = pytest.mark.xdist_group("grpc-limits")

REFLECTION = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
OK, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED = 0, 8, 4
# Set in kernelpolicy.server.peer_calls, which reads it; 2 s leave the calls of one peer, opened
# one after another in a few milliseconds, all held at once.
LIMIT_SECONDS = 2.0
LATE = f"MAX_GRPC_REQUEST_SECONDS ({LIMIT_SECONDS:g} s)"


@dataclass(frozen=True)
class Case:
    path: str
    payload: bytes
    end: bool
    late: bool  # the request never arrives whole: the daemon must end the call


CASES = {
    "headers-only-resolve": Case(RESOLVE, b"", end=False, late=True),
    "announced-only-resolve": Case(RESOLVE, half_sent(1000, 0), end=False, late=True),
    "half-sent-resolve": Case(RESOLVE, half_sent(1000, 500), end=False, late=True),
    "all-but-ten-bytes-at-the-size-limit": Case(
        RESOLVE, half_sent(MAX_TCP_REQUEST_BYTES, MAX_TCP_REQUEST_BYTES - 10), end=False, late=True
    ),
    "half-sent-watch": Case(WATCH, half_sent(10, 5), end=False, late=True),
    "silent-reflection-stream": Case(REFLECTION, b"", end=False, late=True),
    "whole-resolve": Case(RESOLVE, EMPTY, end=True, late=False),
    "whole-watch": Case(WATCH, EMPTY, end=True, late=False),
}


@dataclass
class Outcome:
    status: int | str | None  # None: the daemon has not ended the call
    detail: str
    answered: bool


@dataclass
class Run:
    outcomes: dict[str, Outcome]
    peer_statuses: list[int | str]  # MAX_GRPC_CALLS_PER_PEER + 1 headers-only calls of one peer
    peer_details: list[str]
    after: int | str | None  # a whole Resolve from that peer once its calls were ended


def _pump(running_on: dict[H2Calls, int]) -> None:
    """Pump until each connection holds only its calls that run on (a bound on a hang, not a
    speed check: the limit and 30 s)."""
    deadline = time.monotonic() + LIMIT_SECONDS + 30
    while time.monotonic() < deadline:
        for connection in running_on:
            connection.pump(0.02)
        if all(c.held == held for c, held in running_on.items()):
            return


@pytest.fixture(scope="module")
def run() -> Iterator[Run]:
    # 127.0.0.2 and up as peers of their own, as remote hosts would be (the daemon groups all of
    # 127.0.0.0/8 as one peer: tests/test_grpc_peer_groups.py): each case's calls apart.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(peer_calls, "MAX_GRPC_REQUEST_SECONDS", LIMIT_SECONDS)
        patch.setattr(peers, "LOOPBACK_V4", ipaddress.IPv4Network("127.0.0.1/32"))
        yield from _run()


def _run() -> Iterator[Run]:
    with running_daemon(fixture("cpu"), [ROOT / "policies"], watch=False) as running:
        tcp = running.daemon.bound[0]
        cases = {name: H2Calls(tcp, f"127.0.0.{2 + i}") for i, name in enumerate(CASES)}
        peer = H2Calls(tcp, f"127.0.0.{2 + len(CASES)}")
        try:
            streams = {}
            for name, connection in cases.items():
                case = CASES[name]
                streams[name] = connection.open(case.path, case.payload, end=case.end)
            held = [peer.open(RESOLVE, b"", end=False)
                    for _ in range(MAX_GRPC_CALLS_PER_PEER + 1)]  # fmt: skip
            running_on = {cases[name]: int(name == "whole-watch") for name in CASES}
            _pump({**running_on, peer: 0})
            after = peer.open(RESOLVE, EMPTY, end=True)
            _pump({peer: 0})
            yield Run(
                outcomes={
                    name: Outcome(
                        connection.statuses.get(streams[name]),
                        connection.details.get(streams[name], ""),
                        streams[name] in connection.answered,
                    )
                    for name, connection in cases.items()
                },
                peer_statuses=[peer.statuses.get(call, "held") for call in held],
                peer_details=[peer.details.get(call, "") for call in held],
                after=peer.statuses.get(after),
            )
        finally:
            for connection in [*cases.values(), peer]:
                connection.close()


@pytest.mark.parametrize("name", list(CASES))
def test_a_request_late_ends_its_call(run: Run, name: str) -> None:
    """A call whose request is not in by MAX_GRPC_REQUEST_SECONDS is ended DEADLINE_EXCEEDED,
    naming the limit; a whole Resolve is answered, and a Watch whose request came runs on past
    the limit. Before, the late calls were held for as long as their connection stayed open."""
    case, outcome = CASES[name], run.outcomes[name]
    if case.late:
        assert (outcome.status, outcome.answered) == (DEADLINE_EXCEEDED, False)
        assert LATE in outcome.detail
    elif case.path == RESOLVE:
        assert (outcome.status, outcome.answered) == (OK, True)
    else:
        assert (outcome.status, outcome.answered) == (None, True)


def test_the_ended_calls_free_their_peers_slots(run: Run) -> None:
    """One peer's MAX_GRPC_CALLS_PER_PEER headers-only calls hold its slots until the limit
    (its one more call is refused at once), then all end DEADLINE_EXCEEDED and the same peer
    is answered again."""
    assert sorted(map(str, run.peer_statuses)) == sorted(
        [str(RESOURCE_EXHAUSTED)] + [str(DEADLINE_EXCEEDED)] * MAX_GRPC_CALLS_PER_PEER
    )
    late = [d for s, d in zip(run.peer_statuses, run.peer_details, strict=True) if s == 4]
    assert all(LATE in detail for detail in late)
    assert run.after == OK
