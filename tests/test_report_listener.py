"""The daemon's report socket against what a worker sends: a malformed or oversized line is
refused, counted by reason and ends its connection, the next connection is served, and past the
connection cap the oldest is replaced (found untested by a coverage review). A real listener on
a unix socket; the waits are bounded by the connection's end, not by a time."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.limits import MAX_REPORT_LINE_BYTES
from kernelpolicy.server.halts import Halts
from kernelpolicy.server.report_listener import ReportListener
from kernelpolicy.server.reports import Rejection
from tests.helpers import bundled

WAIT = 30  # seconds a connection may take to end: a bound, not a measure


async def _changed() -> None:
    return None


def _listener(max_connections: int = 4) -> tuple[ReportListener, list[tuple[Any, ...]]]:
    halts = Halts()
    halts.adopt(bundled())
    logged: list[tuple[Any, ...]] = []
    return ReportListener(halts, _changed, lambda *a, **k: logged.append((*a, k)),
                          max_connections=max_connections), logged  # fmt: skip


async def _send_until_closed(path: Path, data: bytes) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(data)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), WAIT)  # to EOF: the listener closed it
    writer.close()
    return answer


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        pytest.param(b"{not json\n", Rejection.MALFORMED, id="not-json"),
        pytest.param(b"[]\n", Rejection.MALFORMED, id="not-an-object"),
        pytest.param(b"x" * (MAX_REPORT_LINE_BYTES + 2) + b"\n", Rejection.TOO_LARGE,
                     id="over-MAX_REPORT_LINE_BYTES"),
    ],
)  # fmt: skip
def test_a_bad_line_ends_its_connection_and_the_next_is_served(
    tmp_path: Path, line: bytes, reason: Rejection
) -> None:
    async def run() -> tuple[bytes, bytes, ReportListener, list[tuple[Any, ...]]]:
        listener, logged = _listener()
        path = tmp_path / "r.sock"
        await listener.start(path)
        try:
            refused = await _send_until_closed(path, line)
            reader, writer = await asyncio.open_unix_connection(str(path))
            writer.write(json.dumps({"clear_halt": "sampler.top_k_top_p"}).encode() + b"\n")
            await writer.drain()
            answer = await asyncio.wait_for(reader.readline(), WAIT)
            writer.close()
        finally:
            await listener.stop()
        return refused, answer, listener, logged

    refused, answer, listener, logged = asyncio.run(run())
    assert refused == b""  # closed without an answer
    assert listener.halts.rejected[reason] == 1
    assert [k["reason"] for *_, k in logged if _[1] == "kernelpolicy.report.rejected"] == [
        reason.value
    ]
    assert json.loads(answer) == {"cleared": []}


def test_past_the_cap_the_oldest_connection_is_replaced(tmp_path: Path) -> None:
    async def run() -> tuple[bytes, int, ReportListener]:
        listener, _ = _listener(max_connections=2)
        path = tmp_path / "r.sock"
        await listener.start(path)
        try:
            opened = []
            for _ in range(3):
                # each admitted before the next: a clear answered means it is in the open set
                reader, writer = await asyncio.open_unix_connection(str(path))
                writer.write(b'{"clear_halt": "sampler.greedy"}\n')
                await writer.drain()
                if len(opened) < 2:  # the third's admission replaces the first at once
                    await asyncio.wait_for(reader.readline(), WAIT)
                opened.append((reader, writer))
            first = opened[0]
            others = [writer for _, writer in opened[1:]]
            closed = await asyncio.wait_for(first[0].read(), WAIT)  # EOF: replaced
            open_now = listener.connections
            for writer in (first[1], *others):
                writer.close()
        finally:
            await listener.stop()
        return closed, open_now, listener

    closed, open_now, listener = asyncio.run(run())
    assert closed == b""
    assert open_now == 2
    assert listener.halts.rejected[Rejection.CONNECTIONS] == 1
