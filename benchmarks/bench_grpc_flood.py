#!/usr/bin/env python3
"""A worker's answer over the unix socket while one local client floods the gRPC TCP port,
side by side with the same answer on a quiet daemon, in one run (issue of 2026-11-26's
attacker review).

Starts ``kernelpolicy serve`` (gRPC on TCP loopback and a unix socket) with RLIMIT_NOFILE set
to ``--file-limit`` (soft and hard), times ``kernelpolicy.connect(unix).resolve()`` quiet, then
under each attack, and prints each time and its ratio to the quiet one:

- ``idle``: ``--connections`` TCP connections that send the HTTP/2 preface and nothing else;
- ``deep``: ``--concurrency`` Resolve calls in flight, each a megabyte of ``[`` as platform_json;
- ``hypothetical``: ``--concurrency`` Resolve calls in flight, each a valid snapshot with an
  env that fills it to the TCP request limit (JSON to parse, and a resolve);
- ``half_sent_1mib``: ``--half-sent`` connections of 100 Resolve calls, each announcing a
  megabyte and sending 990,000 bytes of it, then nothing (the attacker review's);
- ``half_sent_at_limit``: the same with calls announcing ``MAX_TCP_REQUEST_BYTES`` and sending
  all but 10 bytes of it (the most a call may still announce over TCP);

and for the last two the daemon's resident memory before and at its peak (sampled every 0.1 s),
and how the daemon ended the calls (by grpc-status).

Usage: python benchmarks/bench_grpc_flood.py [--file-limit 1024] [--connections 1100]
       [--concurrency 64] [--half-sent 8] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._harness import machine
from kernelpolicy.limits import MAX_TCP_REQUEST_BYTES
from tests.flood_helpers import WITH_FILE_LIMIT
from tests.h2_calls import HalfSent

ROOT = Path(__file__).resolve().parent.parent
H100 = ROOT / "kernelpolicy/fixtures/platforms/h100-sxm.json"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


@contextmanager
def serve(workdir: Path, file_limit: int) -> Iterator[tuple[subprocess.Popen[str], str, str]]:
    """``kernelpolicy serve`` on TCP loopback and a unix socket: (process, tcp, unix)."""
    port_file = workdir / "port"
    unix = f"unix:{workdir / 'kp.sock'}"
    process = subprocess.Popen(
        [sys.executable, "-c", WITH_FILE_LIMIT, str(file_limit), "serve", "--quiet",
         "--no-watch", "--platform", str(H100), "--listen", "127.0.0.1:0", "--listen", unix,
         "--port-file", str(port_file)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
        env={"KERNELPOLICY_LOG_FORMAT": "off", "PATH": "/usr/bin:/bin",
             "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().count("\n") >= 2):
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the daemon did not start")
            time.sleep(0.05)
        tcp = port_file.read_text().split()[0]
        yield process, tcp, unix
    finally:
        process.terminate()
        process.wait(30)


def worker_seconds(unix: str, calls: int = 3) -> float | str:
    """The median time of ``calls`` fresh ``connect(unix).resolve()``, or why it failed."""
    import kernelpolicy

    times = []
    for _ in range(calls):
        start = time.perf_counter()
        try:
            with kernelpolicy.connect(unix, timeout=10) as client:
                client.resolve()
        except Exception as exc:  # a failure is a result here
            return f"FAILED: {type(exc).__name__}: {str(exc)[:120]}"
        times.append(time.perf_counter() - start)
        time.sleep(0.2)
    return sorted(times)[len(times) // 2]


@contextmanager
def idle(tcp: str, connections: int) -> Iterator[int]:
    """``connections`` TCP connections that send the HTTP/2 preface and nothing else: yields
    how many were opened."""
    host, port = tcp.rsplit(":", 1)
    held = []
    for _ in range(connections):
        try:
            sock = socket.create_connection((host, int(port)), timeout=5)
            sock.sendall(PREFACE)
            held.append(sock)
        except OSError:
            break
    try:
        time.sleep(2)
        yield len(held)
    finally:
        for sock in held:
            sock.close()


@contextmanager
def calls_in_flight(tcp: str, concurrency: int, platform_json: str) -> Iterator[dict[str, int]]:
    """``concurrency`` Resolve calls with ``platform_json`` kept in flight from a thread: yields
    the count of their answers by status, filled as they come."""
    import grpc

    from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb
    from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2_grpc as pb_grpc

    stop = threading.Event()
    request = pb.ResolveRequest(platform_json=platform_json)
    answers: dict[str, int] = {}

    async def flood() -> None:
        async with grpc.aio.insecure_channel(
            tcp, options=[("grpc.max_send_message_length", 4 << 20)]
        ) as channel:
            stub = pb_grpc.KernelPolicyStub(channel)

            async def one() -> None:
                while not stop.is_set():
                    try:
                        await stub.Resolve(request, timeout=60)
                        code = "OK"
                    except grpc.RpcError as exc:
                        code = exc.code().name
                    answers[code] = answers.get(code, 0) + 1

            await asyncio.gather(*(one() for _ in range(concurrency)))

    thread = threading.Thread(target=lambda: asyncio.run(flood()), daemon=True)
    thread.start()
    try:
        time.sleep(3)
        yield answers
    finally:
        stop.set()
        thread.join(90)


def big_snapshot(size: int) -> str:
    """A valid snapshot padded with env entries to about ``size`` bytes of JSON."""
    data = json.loads(H100.read_text())
    entries = (size - len(json.dumps(data))) // len('"V00000": "xxxxxxxxxxxx", ')
    data["env"] = {f"V{i:05d}": "x" * 12 for i in range(entries)}
    return json.dumps(data)


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        line = next(x for x in status if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def half_sent(
    process: subprocess.Popen[str], tcp: str, unix: str, connections: int, announce: int
) -> dict[str, Any]:
    """``connections`` x 100 half-sent calls announcing ``announce`` bytes, pumped for 8 s:
    the worker's time meanwhile, the daemon's memory, and how it ended the calls."""
    before = rss_mib(process.pid)
    floods = [HalfSent(tcp, 100, announce, min(990_000, announce - 10)) for _ in range(connections)]
    peak = [before]
    stop = threading.Event()

    def pump(flood: HalfSent) -> None:
        while not stop.is_set() and not flood.closed:
            flood.pump(0.1)

    threads = [threading.Thread(target=pump, args=(f,), daemon=True) for f in floods]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 8
    worker: float | str = ""
    while time.monotonic() < deadline:
        peak.append(rss_mib(process.pid))
        if not worker and time.monotonic() > deadline - 4:
            worker = worker_seconds(unix)
        time.sleep(0.1)
    stop.set()
    for thread in threads:
        thread.join(10)
    ended: dict[str, int] = {}
    for flood in floods:
        for status in flood.statuses.values():
            ended[str(status)] = ended.get(str(status), 0) + 1
        flood.close()
    return {"worker": worker, "rss_before_mib": round(before, 1),
            "rss_peak_mib": round(max(peak), 1), "calls": 100 * connections,
            "ended_by_status": ended}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--file-limit", type=int, default=1024)
    parser.add_argument("--connections", type=int, default=1100)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--half-sent", type=int, default=8, help="connections of 100 calls")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results: dict[str, Any] = {"machine": machine(), "file_limit": args.file_limit}
    with (
        tempfile.TemporaryDirectory(prefix="kp-", dir="/tmp") as workdir,
        serve(Path(workdir), args.file_limit) as (process, tcp, unix),
    ):
        time.sleep(1)
        results["quiet"] = worker_seconds(unix)
        with idle(tcp, args.connections) as opened:
            results["idle"] = worker_seconds(unix)
            results["idle_opened"] = opened
            results["idle_daemon_descriptors"] = len(
                list(Path(f"/proc/{process.pid}/fd").iterdir())
            )
        size = MAX_TCP_REQUEST_BYTES - 64  # room for the request's own fields
        with calls_in_flight(tcp, args.concurrency, "[" * size) as answers:
            results["deep"] = worker_seconds(unix)
            results["deep_answers"] = dict(answers)
        with calls_in_flight(tcp, args.concurrency, big_snapshot(size)) as answers:
            results["hypothetical"] = worker_seconds(unix)
            results["hypothetical_answers"] = dict(answers)
        for case, announce in (("half_sent_1mib", 1 << 20), ("half_sent_at_limit", size)):
            results[case] = half_sent(process, tcp, unix, args.half_sent, announce)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"machine: {results['machine']}")
    quiet = results["quiet"]
    for case in ("quiet", "idle", "deep", "hypothetical"):
        value = results[case]
        if isinstance(value, float) and isinstance(quiet, float):
            print(f"{case:13} worker connect().resolve() {value * 1e3:8.1f} ms   "
                  f"ratio {value / quiet:6.2f}")  # fmt: skip
        else:
            print(f"{case:13} {value}")
    for key in ("idle_opened", "idle_daemon_descriptors", "deep_answers", "hypothetical_answers"):
        print(f"{key:24} {results[key]}")
    for case in ("half_sent_1mib", "half_sent_at_limit"):
        got = results[case]
        worker = got["worker"]
        shown = f"{worker * 1e3:.1f} ms" if isinstance(worker, float) else worker
        print(f"{case:19} worker {shown}; daemon RSS {got['rss_before_mib']} -> peak "
              f"{got['rss_peak_mib']} MiB; {got['calls']} calls, "
              f"ended {got['ended_by_status']}")  # fmt: skip


if __name__ == "__main__":
    main()
