"""Watch and EventStream streams are capped per peer and in all (issue 24, finding 5): past a
cap a client gets RESOURCE_EXHAUSTED naming the limit, and no TCP client can take the unix
socket's share."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from kernelpolicy.errors import DaemonError
from kernelpolicy.limits import MAX_WATCH_STREAMS_PER_PEER
from kernelpolicy.server._generated.flagd.evaluation.v1 import evaluation_pb2 as f1
from kernelpolicy.server._generated.flagd.evaluation.v1 import evaluation_pb2_grpc as f1_grpc
from kernelpolicy.server._generated.flagd.evaluation.v2 import evaluation_pb2 as f2
from kernelpolicy.server._generated.flagd.evaluation.v2 import evaluation_pb2_grpc as f2_grpc
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb
from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2_grpc as pb_grpc
from kernelpolicy.server.peers import peer_key
from kernelpolicy.server.streams import StreamSlots
from kernelpolicy.testing.daemon import running_daemon
from tests.helpers import ROOT, fixture


@pytest.mark.parametrize(
    ("peer", "key"),
    [
        pytest.param("ipv4:10.0.0.7:51234", "10.0.0.7", id="ipv4"),
        pytest.param("ipv6:[::1]:51234", "loopback", id="ipv6"),
        pytest.param("ipv6:[fe80::1%eth0]:9", "fe80::/64", id="ipv6-zone"),
        pytest.param("unix:", "unix", id="unix-unnamed"),
        pytest.param("unix:/run/kernelpolicy/kernelpolicy.sock", "unix", id="unix-path"),
        pytest.param("unix-abstract:kp", "unix", id="unix-abstract"),
        pytest.param("x" * 500, "x" * 100, id="unknown-form-bounded"),
    ],
)
def test_peer_key(peer: str, key: str) -> None:
    """A peer is its address without the port, grouped (server.peers); every unix-socket
    client is the one peer."""
    assert peer_key(peer) == key


A, B, C, UNIX = "ipv4:10.0.0.1:1", "ipv4:10.0.0.2:1", "ipv4:10.0.0.3:1", "unix:"


PER_PEER, TCP_TOTAL = "MAX_WATCH_STREAMS_PER_PEER", "MAX_WATCH_STREAMS"


@pytest.mark.parametrize(
    "takes",
    [
        pytest.param([(A, None), (A, None)], id="within-per-peer"),
        pytest.param([(A, None), (A, None), (A, PER_PEER)], id="per-peer-plus-one"),
        pytest.param([(A, None), (B, None), (A, None), (B, None)], id="two-peers-at-their-caps"),
        pytest.param([(A, None), (B, None), (C, None), (A, None), (B, TCP_TOTAL)],
                     id="tcp-total-plus-one"),
        pytest.param([(A, None), (B, None), (C, None), (B, None), (UNIX, None), (UNIX, None)],
                     id="unix-outside-the-tcp-total"),
        pytest.param([(UNIX, None), (UNIX, None), (UNIX, PER_PEER)], id="unix-per-peer"),
    ],
)  # fmt: skip
def test_stream_slots_table(takes: list[tuple[str, str | None]]) -> None:
    """Caps of 2 per peer and 4 over TCP: each stream opened in turn, or refused
    RESOURCE_EXHAUSTED with a message naming the cap."""
    slots = StreamSlots(total=4, per_peer=2)
    for peer, refused in takes:
        if refused is None:
            slots.take(peer)
            continue
        with pytest.raises(DaemonError, match=rf"\({refused} ") as info:
            slots.take(peer)
        assert info.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_slots_come_back() -> None:
    """A stream that ends gives its slot back, whichever way it ends."""
    slots = StreamSlots(total=1, per_peer=1)
    with pytest.raises(RuntimeError), slots.slot(A):
        raise RuntimeError("the stream failed")
    with slots.slot(A):
        assert slots.count == 1
    assert (slots.count, slots.tcp) == (0, 0)


Opener = Callable[[grpc.Channel], Iterator[Any]]
STREAM_SECONDS = 60
"""Each stream's deadline: a bound on a hang (a first message that never comes fails the test
DEADLINE_EXCEEDED), far longer than the test holds its streams."""
OPENERS = [
    pytest.param(
        lambda ch: pb_grpc.KernelPolicyStub(ch).Watch(pb.WatchRequest(), timeout=STREAM_SECONDS),
        id="watch",
    ),
    pytest.param(
        lambda ch: f1_grpc.ServiceStub(ch).EventStream(
            f1.EventStreamRequest(), timeout=STREAM_SECONDS
        ),
        id="flagd-v1",
    ),
    pytest.param(
        lambda ch: f2_grpc.ServiceStub(ch).EventStream(
            f2.EventStreamRequest(), timeout=STREAM_SECONDS
        ),
        id="flagd-v2",
    ),
]


def _refusal(stream: Iterator[Any]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        next(stream)
    return info.value


@pytest.mark.parametrize("open_stream", OPENERS)
def test_per_peer_cap_on_a_real_daemon(tmp_path: Path, open_stream: Opener) -> None:
    """MAX_WATCH_STREAMS_PER_PEER streams from 127.0.0.1, then RESOURCE_EXHAUSTED; the unix
    socket's clients are not refused; closing one stream lets the next one in."""
    unix = f"unix:{tmp_path / 'kp.sock'}"
    with (
        running_daemon(
            fixture("cpu"), [ROOT / "policies"], listen=["127.0.0.1:0", unix], watch=False
        ) as running,
        grpc.insecure_channel(running.daemon.bound[0]) as tcp,
        grpc.insecure_channel(unix) as local,
    ):
        streams = [open_stream(tcp) for _ in range(MAX_WATCH_STREAMS_PER_PEER)]
        for stream in streams:
            next(stream)
        error = _refusal(open_stream(tcp))
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "MAX_WATCH_STREAMS_PER_PEER" in (error.details() or "")
        next(open_stream(local))  # the workers' socket has its own share
        streams.pop().cancel()  # type: ignore[attr-defined]
        deadline = time.monotonic() + 30  # a bound on a hang, not a speed check
        while True:
            stream = open_stream(tcp)
            try:
                next(stream)
                break
            except grpc.RpcError:
                assert time.monotonic() < deadline, "the cancelled stream's slot never came back"
                time.sleep(0.05)


def test_security_doc_states_each_limit() -> None:
    """docs/daemon-security.md names every connection, stream and log limit with its value."""
    from kernelpolicy import limits

    page = (ROOT / "docs/daemon-security.md").read_text()
    shown = {
        "MAX_HTTP_CONNECTIONS": f"{limits.MAX_HTTP_CONNECTIONS}, and at most",
        "MAX_HTTP_CONNECTIONS_PER_PEER": f"{limits.MAX_HTTP_CONNECTIONS_PER_PEER} from one",
        "MAX_HTTP_HEADER_SECONDS": f"{limits.MAX_HTTP_HEADER_SECONDS:g} s from accepting",
        "MAX_HTTP_BODY_SECONDS": f"{limits.MAX_HTTP_BODY_SECONDS:g} s from the end",
        "MAX_HTTP_IDLE_SECONDS": f"{limits.MAX_HTTP_IDLE_SECONDS:g} s between",
        "MAX_WATCH_STREAMS_PER_PEER": f"{limits.MAX_WATCH_STREAMS_PER_PEER} open streams",
        "MAX_WATCH_STREAMS": f"{limits.MAX_WATCH_STREAMS} open streams",
    }
    for name, value in shown.items():
        assert f"| `{name}` | {value}" in page, name
    assert f"`LOG_LINES_PER_MINUTE` ({limits.LOG_LINES_PER_MINUTE})" in page
    assert limits.HTTP_DESCRIPTOR_SHARE == 0.5  # the page says "half"
