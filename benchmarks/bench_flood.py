"""Idle TCP clients against a real daemon with a low descriptor limit (issue 24, finding 5).

Starts ``kernelpolicy serve`` (HTTP on loopback, a unix socket) with RLIMIT_NOFILE set to
``--file-limit``, opens ``--connections`` TCP connections from ``--sources`` loopback addresses,
each sending half a request header, then asks the unix socket (``kernelpolicy.connect``) and
``GET /healthz`` whether they still answer. Prints what the daemon held and its memory before,
during and after the flood::

    python benchmarks/bench_flood.py                      # 5,000 connections, limit 1,024
    python benchmarks/bench_flood.py --sources 1 --json

All of 127.0.0.0/8 is one peer to the daemon (kernelpolicy/server/peers.py), so however many
``--sources`` the flood comes from it is one peer, and so is the ``/healthz`` client: what this
measures is the per-peer cap (at most ``MAX_HTTP_CONNECTIONS_PER_PEER`` held, each new
connection past it replacing the peer's oldest: ``replaced_peer_cap``), not the total cap
(``replaced_total_cap`` needs several peers, which loopback cannot give; its replacements are
table-tested in tests/test_http_connections.py).

The test suite runs the same with a few hundred connections (tests/test_server_flood.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._harness import machine
from tests.flood_helpers import (
    flood,
    healthz,
    metric,
    resolve_over_unix,
    serve_with_file_limit,
)


def _answers(what: str, ask: Any) -> dict[str, Any]:
    start = time.perf_counter()
    try:
        answer = ask()
    except Exception as exc:  # reported, not raised: a failure is a result here
        return {what: f"FAILED: {type(exc).__name__}: {str(exc)[:200]}"}
    return {what: answer, f"{what}_seconds": round(time.perf_counter() - start, 3)}


def run(connections: int, file_limit: int, sources: int, settle: float) -> dict[str, Any]:
    addresses = [f"127.0.{1 + i // 250}.{2 + i % 250}" for i in range(sources)]
    with (
        tempfile.TemporaryDirectory() as workdir,
        serve_with_file_limit(Path(workdir), file_limit) as served,
    ):
        time.sleep(1.0)  # let start-up garbage settle before measuring
        result: dict[str, Any] = {
            "connections": connections, "file_limit": file_limit, "sources": sources,
            "rss_kib_before": served.rss_kib(), "descriptors_before": served.descriptors(),
        }  # fmt: skip
        clients = flood(served.port, connections, addresses)
        connected, _ = clients.settle(settle)
        time.sleep(1.0)
        result |= {"client_connected": connected, "rss_kib_during": served.rss_kib(),
                   "descriptors_during": served.descriptors()}  # fmt: skip
        result |= _answers("unix_resolve", lambda: resolve_over_unix(served.unix))
        result |= _answers("healthz", lambda: healthz(served.url))
        result |= _answers(
            "held_by_daemon", lambda: metric(served.url, "kernelpolicy_http_connections ")
        )
        for reason in ("replaced_peer_cap", "replaced_total_cap", "header_timeout"):
            name = f'kernelpolicy_http_connections_closed_total{{reason="{reason}"}}'
            result |= _answers(reason, lambda name=name: metric(served.url, name))
        result["client_still_open"] = clients.open()
        clients.close()
        time.sleep(2.0)
        result["rss_kib_after_close"] = served.rss_kib()
        result["descriptors_after_close"] = served.descriptors()
        result["daemon_alive"] = served.process.poll() is None
    result["stopped_by_sigterm"] = served.stopped
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("--connections", type=int, default=5000)
    parser.add_argument("--file-limit", type=int, default=1024)
    parser.add_argument("--sources", type=int, default=32, help="loopback source addresses")
    parser.add_argument("--settle", type=float, default=30.0, help="seconds to let it connect")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.connections, args.file_limit, args.sources, args.settle)
    result["machine"] = machine()
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for key, value in result.items():
        print(f"{key:28} {value}")


if __name__ == "__main__":
    main()
