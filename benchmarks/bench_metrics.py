#!/usr/bin/env python3
"""What ``serve --http`` costs gRPC: the same daemon with and without the metrics interceptor.

Two real ``kernelpolicy serve`` processes (H100 fixture, bundled pack), one plain and one with
``--http`` (which counts and times every RPC), loaded in paired, interleaved rounds by a third
process (bench_grpc's load generator). Prints requests per second and p50/p99 for each, and the
median of the paired rounds' ratios (with/without).

Usage: python benchmarks/bench_metrics.py [--seconds S] [--concurrency N] [--rounds R]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_grpc import PLATFORM, _run_load, _start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from _harness import machine

    serve = [sys.executable, "-m", "kernelpolicy", "serve", "--listen", "127.0.0.1:0", "--quiet",
             "--no-watch", "--platform", str(PLATFORM)]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        plain_file, http_file = Path(tmp, "plain"), Path(tmp, "http")
        plain = _start([*serve, "--port-file", str(plain_file)], plain_file)
        http = _start([*serve, "--port-file", str(http_file), "--http", "127.0.0.1:0"], http_file)
        targets = {
            "without": plain_file.read_text().split()[0],
            "with --http": http_file.read_text().split()[0],
        }
        runs: dict[str, dict[str, list[dict[str, float]]]] = {}
        try:
            for method in ("Resolve", "ResolveString"):
                for _ in range(args.rounds):
                    for name, address in targets.items():
                        run = _run_load(address, method, args.seconds, args.concurrency)
                        runs.setdefault(method, {}).setdefault(name, []).append(run)
        finally:
            for proc in (plain, http):
                proc.terminate()
                proc.wait(10)
    print(
        f"machine: {machine()}; {args.concurrency} requests in flight, {args.seconds:.0f} s per "
        f"round, {args.rounds} paired rounds (best round shown)"
    )
    for method, sides in runs.items():
        for name, rounds in sides.items():
            best = max(rounds, key=lambda r: r["rps"])
            print(
                f"{method:<14} {name:<12} {best['rps']:8.0f} req/s   "
                f"p50 {best['p50_ms']:6.2f} ms   p99 {best['p99_ms']:6.2f} ms"
            )
        pairs = zip(sides["with --http"], sides["without"], strict=True)
        ratio = statistics.median(a["rps"] / b["rps"] for a, b in pairs)
        print(f"{method:<14} ratio        {ratio:8.2f}   median of paired rounds (with/without)")


if __name__ == "__main__":
    main()
