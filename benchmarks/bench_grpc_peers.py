#!/usr/bin/env python3
"""The daemon's memory while clients reopen gRPC calls as fast as they are refused.

Starts ``kernelpolicy serve`` (gRPC on 127.0.0.1 and a unix socket), opens half-sent Resolve
calls from 8 loopback addresses (45 each, 360), then ``--churners`` connections, each from an
address of its own, keep 50 Resolve calls open that announce ``MAX_TCP_REQUEST_BYTES`` and send
as much as the daemon's window lets, opening a new call each time one is refused, for
``--seconds``. Prints the daemon's RSS before, once the holders' calls are in, at its peak
(sampled every 0.1 s) and 5 s after every client closed, how many calls the holders held and
how many the churners opened.

All of 127.0.0.0/8 is one peer to the daemon (kernelpolicy/server/peers.py), so the holders'
and the churners' addresses are one peer: the holders hold that peer's
``MAX_GRPC_CALLS_PER_PEER`` (64), not the 320 of ``MAX_GRPC_TCP_CALLS`` that 8 peers filled
before, and the churn is refused at the per-peer cap (until the holders' calls pass
``MAX_GRPC_REQUEST_SECONDS`` and are ended, freeing places the churners' calls take). What it
measures now is the memory of one peer reopening refused calls as fast as they are refused,
not of the TCP listener's total cap filled. Past 24 churners the 8 + N connections pass
``MAX_GRPC_CONNECTIONS_PER_PEER`` (32), and the daemon closes the peer's least recently active
ones to take each new one.

Usage: python benchmarks/bench_grpc_peers.py [--churners 16] [--seconds 12] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._harness import machine
from benchmarks.bench_grpc_flood import rss_mib, serve
from kernelpolicy.limits import MAX_TCP_REQUEST_BYTES
from tests.h2_calls import RESOLVE, H2Calls, half_sent

ANNOUNCE = MAX_TCP_REQUEST_BYTES - 64


def churn(tcp: str, source: str, stop: threading.Event, opened: list[int]) -> None:
    """Keep 50 calls open from ``source``, a new one for each the daemon ends."""
    calls = H2Calls(tcp, source)
    live: set[int] = set()
    while not stop.is_set() and not calls.closed:
        live -= set(calls.statuses)
        while len(live) < 50:
            try:
                live.add(calls.open(RESOLVE, half_sent(ANNOUNCE, ANNOUNCE - 10), end=False))
            except Exception:  # h2 refuses a stream past the daemon's concurrent streams
                break
            opened.append(1)
        calls.pump(0.02)
    calls.close()


def run(tcp: str, pid: int, churners: int, seconds: float) -> dict[str, Any]:
    before = rss_mib(pid)
    holders = [H2Calls(tcp, f"127.0.0.{2 + i}") for i in range(8)]
    for holder in holders:
        for _ in range(45):
            holder.open(RESOLVE, half_sent(1000, 500), end=False)
    for _ in range(10):
        for holder in holders:
            holder.pump(0.05)
    filled, held = rss_mib(pid), sum(holder.held for holder in holders)
    stop, peak = threading.Event(), [filled]
    opened: list[int] = []
    threads = [threading.Thread(target=churn, args=(tcp, f"127.0.1.{2 + i}", stop, opened))
               for i in range(churners)]  # fmt: skip
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        peak.append(rss_mib(pid))
        for holder in holders:
            holder.pump(0.01)
        time.sleep(0.1)
    stop.set()
    for thread in threads:
        thread.join(10)
    for holder in holders:
        holder.close()
    time.sleep(5)
    return {"rss_before_mib": round(before, 1), "rss_filled_mib": round(filled, 1),
            "held": held, "rss_peak_mib": round(max(peak), 1),
            "rss_after_mib": round(rss_mib(pid), 1), "calls_opened": len(opened)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--churners", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=12)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="kp-", dir="/tmp") as workdir,
        serve(Path(workdir), 4096) as (process, tcp, _),
    ):
        time.sleep(1)
        got = {"machine": machine(), **run(tcp, process.pid, args.churners, args.seconds)}
    if args.json:
        print(json.dumps(got, indent=2))
        return
    print(f"machine: {got['machine']}")
    print(f"daemon RSS {got['rss_before_mib']} MiB, {got['rss_filled_mib']} with {got['held']} "
          f"calls held, peak {got['rss_peak_mib']}, {got['rss_after_mib']} 5 s after; "
          f"{got['calls_opened']} calls opened by {args.churners} churners")  # fmt: skip


if __name__ == "__main__":
    main()
