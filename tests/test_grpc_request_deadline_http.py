"""The HTTP listener's side of the request deadline: a request whose body never finishes
arriving, stalled or trickled a byte at a time (sized or chunked), gets 408 naming
MAX_HTTP_BODY_SECONDS and its connection closed, as a half-sent gRPC request is ended after
MAX_GRPC_REQUEST_SECONDS (tests/test_grpc_request_deadline.py); and the security page states
the gRPC limit with its value."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from kernelpolicy.limits import MAX_GRPC_REQUEST_SECONDS
from kernelpolicy.server.connections import Timeouts
from kernelpolicy.server.http import HttpListener
from kernelpolicy.server.metrics import DaemonMetrics
from kernelpolicy.server.state import ServingState
from tests.helpers import ROOT, fixture

SHORT = Timeouts(header=5.0, body=0.3, idle=5.0)  # only the body's is short here
POST = b"POST /ofrep/v1/evaluate/flags/sampler.greedy HTTP/1.1\r\nHost: x\r\n"
SIZED = POST + b"Content-Length: 100\r\n\r\n"
CHUNKED = POST + b"Transfer-Encoding: chunked\r\n\r\n"

Send = Callable[[asyncio.StreamWriter], Coroutine[Any, Any, None]]


def _trickled(head: bytes, piece: bytes) -> Send:
    """``head``, then ``piece`` every 50 ms until the daemon closes the connection."""

    async def send(writer: asyncio.StreamWriter) -> None:
        writer.write(head)
        while not writer.is_closing():
            writer.write(piece)
            await asyncio.sleep(0.05)

    return send


def _stalled(head: bytes) -> Send:
    async def send(writer: asyncio.StreamWriter) -> None:
        writer.write(head)

    return send


async def _until_closed(reader: asyncio.StreamReader) -> bytes:
    data = b""
    try:
        while chunk := await reader.read(65536):
            data += chunk
    except ConnectionError:
        pass
    return data


@pytest.mark.parametrize(
    "send",
    [
        pytest.param(_stalled(SIZED + b'{"con'), id="sized-body-stalled"),
        pytest.param(_trickled(SIZED, b" "), id="sized-body-trickled"),
        pytest.param(_trickled(CHUNKED, b"1\r\n \r\n"), id="chunked-body-trickled"),
    ],
)
def test_a_body_that_never_finishes_gets_408_and_is_closed(send: Send) -> None:
    """The body's time counts from its headers to its end, not between bytes: a client that
    keeps sending a little never holds the connection past the body timeout. The wait below
    only bounds a hang: the test checks what happens, not how fast."""
    state = ServingState(fixture("cpu"), {}, [ROOT / "policies"], {})

    async def scenario() -> bytes:
        listener = HttpListener(state, DaemonMetrics(state), lambda: None, timeouts=SHORT)
        url = await listener.start("127.0.0.1:0")
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", int(url.rsplit(":")[2]))
            sending = asyncio.ensure_future(send(writer))
            data = await asyncio.wait_for(_until_closed(reader), 30)
            writer.close()
            await asyncio.wait_for(sending, 30)
            return data
        finally:
            await listener.stop()

    data = asyncio.run(scenario())
    assert data.startswith(b"HTTP/1.1 408")
    assert b"MAX_HTTP_BODY_SECONDS (0.3 s)" in data


def test_security_doc_states_the_request_deadline() -> None:
    """docs/daemon-security.md names MAX_GRPC_REQUEST_SECONDS with its value."""
    page = (ROOT / "docs/daemon-security.md").read_text()
    assert f"| `MAX_GRPC_REQUEST_SECONDS` | {MAX_GRPC_REQUEST_SECONDS:g} s from" in page
