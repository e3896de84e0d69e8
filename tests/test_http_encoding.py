"""Request bodies with a Content-Encoding (a security review of the HTTP listener): refused
with 415 and an OFREP PARSE_ERROR before the body is read, never a daemon 500, never
decompressed, and the connection closed rather than read to the end."""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import zlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from aiohttp import web
from multidict import CIMultiDict

from kernelpolicy.server import http_body
from kernelpolicy.server.connections import Timeouts
from kernelpolicy.server.http import HttpListener
from kernelpolicy.server.metrics import DaemonMetrics
from kernelpolicy.server.state import ServingState
from kernelpolicy.testing.daemon import running_daemon
from tests.helpers import ROOT, fixture
from tests.http_helpers import call

KEY = "sampler.greedy"
ONE = "/ofrep/v1/evaluate/flags/" + KEY
BULK = "/ofrep/v1/evaluate/flags"
JSON_BODY = b'{"context":{}}'
BOMB = gzip.compress(b"\0" * (64 * 1024 * 1024), compresslevel=9)  # 64 KiB, inflates to 64 MiB


@pytest.fixture(scope="module")
def logged() -> Iterator[tuple[str, io.StringIO]]:
    log = io.StringIO()
    with running_daemon(
        fixture("cpu"), [ROOT / "policies"], watch=False, http="127.0.0.1:0",
        log_format="json", log_stream=log,
    ) as running:  # fmt: skip
        yield running.daemon.fleet.url, log


def _ofrep_counts(url: str) -> dict[str, float]:
    """kernelpolicy_http_requests_total of the OFREP routes, by status."""
    counts: dict[str, float] = {}
    for line in call(url, "GET", "/metrics").body.decode().splitlines():
        if line.startswith("kernelpolicy_http_requests_total{") and 'route="/ofrep' in line:
            status = line.split('status="', 1)[1].split('"', 1)[0]
            counts[status] = counts.get(status, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


@pytest.mark.parametrize(
    ("path", "coding", "body", "status"),
    [
        pytest.param(ONE, None, JSON_BODY, 200, id="none"),
        pytest.param(ONE, "identity", JSON_BODY, 200, id="identity"),
        pytest.param(ONE, "Identity ", JSON_BODY, 200, id="identity-any-case"),
        pytest.param(ONE, "deflate", b"\x00\x01garbage", 415, id="deflate-not-deflate"),
        pytest.param(ONE, "gzip", b"notgzip", 415, id="gzip-not-gzip"),
        pytest.param(ONE, "gzip", b"\x1f\x8b\x08\x00\x00", 415, id="gzip-truncated"),
        pytest.param(ONE, "gzip", gzip.compress(JSON_BODY), 415, id="gzip-valid"),
        pytest.param(ONE, "deflate", zlib.compress(JSON_BODY), 415, id="deflate-valid"),
        pytest.param(ONE, "gzip", BOMB, 415, id="gzip-bomb"),
        pytest.param(ONE, "br", b"notbrotli", 415, id="brotli"),
        pytest.param(ONE, "zstd", b"notzstd", 415, id="zstd"),
        pytest.param(ONE, "x-unknown", JSON_BODY, 415, id="unknown-coding"),
        pytest.param(ONE, "gzip, identity", JSON_BODY, 415, id="list-with-gzip"),
        pytest.param(BULK, "deflate", b"\x00\x01garbage", 415, id="bulk-deflate-not-deflate"),
        pytest.param(BULK, "gzip", gzip.compress(JSON_BODY), 415, id="bulk-gzip-valid"),
    ],
)  # fmt: skip
def test_content_encoding_table(
    logged: tuple[str, io.StringIO], path: str, coding: str | None, body: bytes, status: int
) -> None:
    """Only the body as sent is read; any other coding is the client's mistake: 415, an OFREP
    PARSE_ERROR naming the coding and what is accepted, the connection closed, counted as a
    415 (no 5xx) and no error in the daemon's log."""
    url, log = logged
    before = _ofrep_counts(url)
    headers = {"Content-Type": "application/json"}
    if coding is not None:
        headers["Content-Encoding"] = coding
    reply = call(url, "POST", path, body, headers)
    assert reply.status == status, reply.body
    assert reply.headers["content-type"].startswith("application/json")
    document = reply.json()
    after = _ofrep_counts(url)
    assert {s: after[s] - before.get(s, 0.0) for s in after} == {
        s: float(s == str(status)) for s in after
    }
    assert '"kernelpolicy.http.error"' not in log.getvalue()
    if status == 200:
        assert "errorCode" not in document
        return
    assert document["errorCode"] == "PARSE_ERROR"
    assert repr(coding) in document["errorDetails"]
    assert "identity" in document["errorDetails"]
    assert document.get("key") == (KEY if path == ONE else None)
    assert reply.headers["accept-encoding"] == "identity"
    assert reply.headers["connection"] == "close"


# Closed, not drained: on a listener whose body timeout (how long aiohttp would read on after
# an answer) is far longer than the wait below, which only bounds a hang.

LONG = Timeouts(header=600, body=600, idle=600)


async def _until_closed(reader: asyncio.StreamReader) -> bytes:
    data = b""
    try:
        while chunk := await reader.read(65536):
            data += chunk
    except ConnectionError:  # a reset after the answer: the client was still sending
        pass
    return data


def _exchange(
    request: bytes,
    read: Callable[[asyncio.StreamReader], Awaitable[bytes]] = _until_closed,
    metrics: DaemonMetrics | None = None,
    wait: float = 30,
) -> bytes:
    """Send ``request`` raw to a fresh listener (``LONG`` timeouts) and return what ``read``
    takes from the answer (by default all of it, to the connection's end), within ``wait``
    seconds (a bound on a hang, not a measure)."""
    state = ServingState(fixture("cpu"), {}, [ROOT / "policies"], {})
    counted = metrics or DaemonMetrics(state)

    async def scenario() -> bytes:
        listener = HttpListener(state, counted, lambda: None, timeouts=LONG)
        url = await listener.start("127.0.0.1:0")
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", int(url.rsplit(":")[2]))
            writer.write(request)
            data = await asyncio.wait_for(read(reader), wait)
            writer.close()
            return data
        finally:
            await listener.stop()

    return asyncio.run(scenario())


def _head(path: str, *headers: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: x", "Content-Type: application/json", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@pytest.mark.parametrize(
    ("request_start", "path"),
    [
        pytest.param(_head(ONE, "Content-Encoding: gzip", f"Content-Length: {8 * len(BOMB)}"),
                     ONE, id="headers-only"),
        pytest.param(_head(ONE, "Content-Encoding: gzip", f"Content-Length: {8 * len(BOMB)}")
                     + BOMB, ONE, id="part-of-a-bomb"),
        pytest.param(_head(BULK, "Content-Encoding: deflate", "Transfer-Encoding: chunked")
                     + b"%x\r\n" % len(BOMB) + BOMB + b"\r\n", BULK, id="chunked-never-ending"),
    ],
)  # fmt: skip
def test_refused_body_closes_the_connection(request_start: bytes, path: str) -> None:
    """A client that sends only part of an encoded body gets its 415 and then the end of the
    connection, while the rest of its body is still owed: the daemon does not wait for it
    (nor read, nor inflate it). The close is neither a timeout nor a hang-up."""
    metrics = DaemonMetrics(ServingState(fixture("cpu"), {}, [ROOT / "policies"], {}))
    data = _exchange(request_start, metrics=metrics)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 415 "), data[:200]
    assert b"\r\nconnection: close" in head.lower()
    assert json.loads(body)["errorCode"] == "PARSE_ERROR"
    counted = {
        (s.labels["route"], s.labels["status"]): s.value
        for s in metrics.http_requests.collect()[0].samples
        if s.name.endswith("_total")
    }
    assert counted == {(path if path == BULK else "/ofrep/v1/evaluate/flags/{key}", "415"): 1.0}
    closed = [
        s.value
        for s in metrics.connections_closed.collect()[0].samples
        if s.name.endswith("_total")
    ]
    assert not any(closed)


class _Request:
    """What ``http._body`` reads of a request: its headers, and a body that fails."""

    def __init__(self, error: BaseException) -> None:
        self.headers: CIMultiDict[str] = CIMultiDict()
        self.content_length = None
        self._error = error

    async def read(self) -> bytes:
        raise self._error


@pytest.mark.parametrize(
    ("error", "expected", "status"),
    [
        pytest.param(web.RequestPayloadError("Not enough data for satisfy transfer length"),
                     http_body.BadBody, 400, id="payload-error"),
        pytest.param(ConnectionResetError("Connection lost"), http_body.HungUp, None, id="hang-up"),
    ],
)  # fmt: skip
def test_body_read_errors_are_translated(
    error: BaseException, expected: type[Exception], status: int | None
) -> None:
    """What aiohttp raises while reading a body maps to the client's mistake (400, OFREP
    PARSE_ERROR naming it) or to a hang-up; never to the daemon's 500."""
    request: Any = _Request(error)
    with pytest.raises(expected) as raised:
        asyncio.run(http_body.read_body(request, 10.0))
    if status is not None:
        assert isinstance(raised.value, http_body.BadBody)
        assert raised.value.status == status
        assert "does not match its headers" in raised.value.details
        assert "transfer length" in raised.value.details


@pytest.mark.parametrize(
    ("headers", "first_line"),
    [
        pytest.param(("Content-Length: 2",), b"HTTP/1.1 100 Continue", id="readable-body"),
        pytest.param(("Content-Encoding: gzip", "Content-Length: 2"), b"HTTP/1.1 415 ",
                     id="encoded-body-refused-unsent"),
        pytest.param((f"Content-Length: {10 * 2**20}",), b"HTTP/1.1 413 ",
                     id="oversized-body-refused-unsent"),
        pytest.param(("Content-Length: 2", "Expect: 200-ok"), b"HTTP/1.1 417 ",
                     id="another-expectation"),
    ],
)  # fmt: skip
def test_expect_continue_only_for_a_body_that_will_be_read(
    headers: tuple[str, ...], first_line: bytes
) -> None:
    """Expect: 100-continue: "100 Continue" for a body the daemon reads; for one it refuses
    unread (an encoding, a Content-Length over MAX_HTTP_BODY_BYTES) its refusal at once is the
    final answer, so the client never sends the body (it used to be told to send it)."""
    given = any(h.startswith("Expect") for h in headers)
    expect = () if given else ("Expect: 100-continue",)
    line = _exchange(_head(BULK, *headers, *expect), read=lambda r: r.readline(), wait=10)
    assert line.startswith(first_line)


def test_a_body_refused_before_it_was_asked_for_ends_the_connection() -> None:
    """Expect: 100-continue with a Content-Length over the limit: the 413 says Connection:
    close and the connection ends at once; it no longer waits (MAX_HTTP_BODY_SECONDS) for the
    body the client was never told to send, taking the client's next request as that body."""
    data = _exchange(_head(BULK, f"Content-Length: {10 * 2**20}", "Expect: 100-continue"))
    head = data.partition(b"\r\n\r\n")[0].lower()
    assert head.startswith(b"http/1.1 413 ")
    assert b"\r\nconnection: close" in head
