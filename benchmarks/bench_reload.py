#!/usr/bin/env python3
"""Answer latency while the daemon reloads a large policy file, beside the same load without one.

A real ``kernelpolicy serve`` (its own process, file watching off) serves the bundled pack;
concurrent grpc.aio clients in this process send Resolve requests (half answered from the
per-revision cache, half with a call context, computed per request). After a baseline period a
policy file with ``--features`` features is added and the daemon is sent SIGHUP; the reload
window lasts until the first answer from the new revision. Latencies of requests sent in the
baseline and in the reload window are reported side by side (p50, p99, max): the reload builds
the new set in a worker thread and swaps it in atomically, so answers keep flowing; what remains
is the worker thread's share of the interpreter lock.

Usage: python benchmarks/bench_reload.py [--features N] [--concurrency C] [--baseline S] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLATFORM = ROOT / "kernelpolicy/fixtures/platforms/h100-sxm.json"
sys.path.insert(0, str(Path(__file__).resolve().parent))


def policy_text(features: int) -> str:
    """A valid policy file with ``features`` features of two candidates each."""
    parts = ['schema = "kernelpolicy.policy/v1"\n']
    for i in range(features):
        parts.append(
            f'\n[features."bench.f{i}"]\ndescription = "benchmark feature {i}"\n'
            f'fallback = "torch"\n\n[[features."bench.f{i}".candidates]]\nimpl = "fast"\n'
            f'entry = "os:getcwd"\nvendor = "nvidia"\ncapability = ">=8.0"\n\n'
            f'[[features."bench.f{i}".candidates]]\nimpl = "torch"\nentry = "os:getcwd"\n'
        )
    return "".join(parts)


def start_daemon(policies: Path, port_file: Path) -> subprocess.Popen[bytes]:
    from _harness import clean_env

    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelpolicy", "serve", "--quiet", "--no-watch",
         "--listen", "127.0.0.1:0", "--port-file", str(port_file), "--policies", str(policies),
         "--platform", str(PLATFORM)],
        env=clean_env(), cwd=ROOT,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not (port_file.exists() and port_file.read_text().strip()):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the daemon did not start")
        time.sleep(0.05)
    return proc


async def load(
    address: str, concurrency: int, baseline: float, reload: object
) -> dict[str, object]:
    """Drive requests; call ``reload()`` after ``baseline`` seconds; stop at revision 2."""
    import grpc
    from google.protobuf import struct_pb2

    from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb
    from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2_grpc as pb_grpc

    context = struct_pb2.Struct()
    context.update({"has_generators": False, "has_top_k": True, "has_top_p": True,
                    "logprobs_mode": "raw_logprobs"})  # fmt: skip
    requests = [
        pb.ResolveRequest(features=["sampler.top_k_top_p"]),
        pb.ResolveRequest(features=["sampler.top_k_top_p"], context=context),
    ]
    samples: list[tuple[float, float, int]] = []  # (sent, seconds, revision)
    marks: dict[str, float] = {}
    done = asyncio.Event()

    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.KernelPolicyStub(channel)

        async def client(index: int) -> None:
            n = index
            while not done.is_set():
                sent = time.perf_counter()
                answer = await stub.Resolve(requests[n % 2], timeout=600)
                samples.append((sent, time.perf_counter() - sent, answer.revision))
                n += 1
                if answer.revision >= 2 and "new" not in marks:
                    marks["new"] = time.perf_counter()
                    done.set()

        async def conductor() -> None:
            marks["start"] = time.perf_counter()
            await asyncio.sleep(baseline)
            marks["reload"] = time.perf_counter()
            reload()  # type: ignore[operator]

        await asyncio.gather(conductor(), *(client(i) for i in range(concurrency)))

    def stats(rows: list[float]) -> dict[str, float]:
        rows = sorted(rows)
        pick = lambda q: rows[min(len(rows) - 1, int(q * len(rows)))] * 1e3  # noqa: E731
        return {"requests": len(rows), "p50_ms": pick(0.5), "p99_ms": pick(0.99),
                "max_ms": rows[-1] * 1e3}  # fmt: skip

    before = [s for sent, s, rev in samples if marks["start"] + 0.5 <= sent < marks["reload"]]
    during = [s for sent, s, rev in samples if marks["reload"] <= sent < marks["new"]]
    return {
        "reload_seconds": marks["new"] - marks["reload"],
        "baseline": stats(before),
        "during_reload": stats(during) if during else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--features", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--baseline", type=float, default=3.0, help="seconds before the reload")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from _harness import machine

    with tempfile.TemporaryDirectory() as tmp:
        policies = Path(tmp) / "policies"
        shutil.copytree(ROOT / "policies", policies)
        text = policy_text(args.features)
        proc = start_daemon(policies, Path(tmp) / "port")
        try:
            address = (Path(tmp) / "port").read_text().split()[0]

            def reload() -> None:
                (policies / "50-bench.toml").write_text(text)
                proc.send_signal(signal.SIGHUP)

            result = asyncio.run(load(address, args.concurrency, args.baseline, reload))
        finally:
            proc.terminate()
            proc.wait(30)
    result.update(features=args.features, bytes=len(text), concurrency=args.concurrency,
                  machine=machine())  # fmt: skip
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{machine()}; reload of {args.features} features ({len(text) / 1e6:.1f} MB) took "
          f"{result['reload_seconds']:.1f} s; {args.concurrency} clients")  # fmt: skip
    print(f"{'window':<16}{'requests':>10}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}")
    for name in ("baseline", "during_reload"):
        row = result[name]
        if row:
            print(f"{name:<16}{row['requests']:>10}{row['p50_ms']:>10.2f}{row['p99_ms']:>10.2f}"  # type: ignore[index]
                  f"{row['max_ms']:>10.2f}")  # type: ignore[index]  # fmt: skip


if __name__ == "__main__":
    main()
