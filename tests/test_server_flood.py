"""A flood of idle TCP clients against a real `kernelpolicy serve` under a low descriptor limit:
the workers' unix socket and /healthz keep answering (issue 24, finding 5).

benchmarks/bench_flood.py runs the same with the issue's figures (5,000 connections, a limit of
1,024 files) and reports memory; this one stays small enough to take a few seconds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpolicy.limits import HTTP_DESCRIPTOR_SHARE, MAX_HTTP_CONNECTIONS_PER_PEER
from tests.flood_helpers import (
    flood,
    healthz,
    metric,
    resolve_over_unix,
    serve_with_file_limit,
)

FILE_LIMIT = 256
CAP = int(FILE_LIMIT * HTTP_DESCRIPTOR_SHARE)  # 128 connections in all


@pytest.mark.parametrize(
    ("connections", "sources", "replaced"),
    [
        pytest.param(300, ["127.0.0.2"], "replaced_peer_cap", id="one-peer-past-the-file-limit"),
        pytest.param(600, [f"127.0.0.{i}" for i in range(2, 10)], "replaced_peer_cap",
                     id="eight-loopback-addresses-are-one-peer"),
    ],
)  # fmt: skip
def test_idle_connections_cannot_starve_the_daemon(
    tmp_path: Path, connections: int, sources: list[str], replaced: str
) -> None:
    """More idle, half-sent-header connections than the daemon has descriptors: the daemon
    holds at most its caps (new connections replace the flooders' oldest), and the workers'
    unix socket and /healthz still answer."""
    with serve_with_file_limit(tmp_path, FILE_LIMIT) as served:
        clients = flood(served.port, connections, sources)
        try:
            connected, _ = clients.settle(wait=20)
            assert connected > FILE_LIMIT  # the flood really is past the descriptor limit
            assert resolve_over_unix(served.unix) == "torch"
            assert healthz(served.url) == 200
            assert served.descriptors() < FILE_LIMIT
            held = metric(served.url, "kernelpolicy_http_connections ")
            # all of loopback is one peer (server.peers), the scrape's own connection included;
            # the total cap's replacements are table-tested in tests/test_http_connections.py
            assert held <= min(CAP, MAX_HTTP_CONNECTIONS_PER_PEER)
            closed = f'kernelpolicy_http_connections_closed_total{{reason="{replaced}"}}'
            assert metric(served.url, closed) > 0
        finally:
            clients.close()
        assert served.process.poll() is None
    assert served.stopped  # SIGTERM still stops it cleanly
