"""Calls served on the serving thread while a cold Triton variant builds in the background.

Review C2's method (its g5.py): the torch fallback (batch 64, vocab 128256, float32) is called
back to back on the main thread for ``--idle`` seconds with nothing building, then for the whole
of a cold build of the call's Triton variant (a fresh ``TRITON_CACHE_DIR``), started by the
sampler's serving form as a first call starts it. ``--mode child``: the package's build (the
compile in a child process, then the load in the build's thread); ``--mode thread``: the
compile in the build's thread (``Sampler(child=None)``, as before the child). Prints and writes
(``--out``) each phase's median, p99, max and calls over 50 ms, the time from the first call to
the switch (the variant built), the child's share of it, and the first calls on the variant.

Run each mode in a fresh process: ``python3 benchmarks/bench_build_stall.py --mode thread``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "n": len(ordered),
        "median_ms": round(statistics.median(ordered) * 1e3, 3),
        "p99_ms": round(ordered[int(len(ordered) * 0.99)] * 1e3, 3),
        "max_ms": round(ordered[-1] * 1e3, 1),
        "over_50ms": sum(v > 0.05 for v in ordered),
    }


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--mode", choices=["child", "thread"], required=True)
    parser.add_argument("--idle", type=float, default=5.0)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--out", type=Path, default=None)
    return parser.parse_args()


def write(result: dict[str, Any], out: Path | None) -> None:
    print(json.dumps(result))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        with (out / "build_stall.jsonl").open("a") as f:
            f.write(json.dumps(result) + "\n")


def main() -> int:
    args = arguments()
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="kp-stall-")  # cold: nothing built
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import torch

    from kernelpolicy.kernels import torch_impl
    from kernelpolicy.kernels.builds import Compiling
    from kernelpolicy.kernels.sampling_triton import Sampler
    from kernelpolicy.kernels.sampling_triton.child import Child

    marks: dict[str, float] = {}

    class Timed(Child):
        def compile(self, task: dict[str, Any]) -> None:
            marks["child_began"] = time.perf_counter()
            try:
                super().compile(task)
            finally:
                marks["child_ended"] = time.perf_counter()

    sampler = Sampler(child=Timed() if args.mode == "child" else None, cache=lambda: None)
    builds = sampler.builds
    device = "cuda:0"
    x = torch.randn(args.batch, args.vocab, device=device)
    k, p = torch.full((args.batch,), 50), torch.full((args.batch,), 0.9)

    slow: list[tuple[float, float]] = []  # calls over 20 ms: (when, from the first call; ms)

    def serve(going: Callable[[], bool]) -> list[float]:
        latencies = []
        while going():
            began = time.perf_counter()
            torch_impl.top_k_top_p(x, k, p)
            torch.cuda.synchronize()
            latencies.append(time.perf_counter() - began)
            if latencies[-1] > 0.02:
                slow.append((began, latencies[-1] * 1e3))
        return latencies

    for _ in range(20):
        torch_impl.top_k_top_p(x, k, p)
    torch.cuda.synchronize()
    began = time.perf_counter()
    idle = serve(lambda: time.perf_counter() - began < args.idle)
    variant = sampler.variant(x, k, p)
    assert variant is not None  # k 50 is within the kernels' max_k
    first = time.perf_counter()
    with contextlib.suppress(Compiling):  # the first call starts the build
        sampler.nonblocking(x, k, p)
    slow.clear()
    busy = serve(lambda: not builds.ready(variant) and variant not in builds._failed)
    switched = time.perf_counter() - first
    failed = builds._failed.get(variant)
    on_variant = []
    if failed is None:
        for _ in range(5):
            began = time.perf_counter()
            sampler.nonblocking(x, k, p)
            torch.cuda.synchronize()
            on_variant.append(round((time.perf_counter() - began) * 1e3, 2))
    result = {
        "mode": args.mode,
        "device": torch.cuda.get_device_name(0),
        "variant": variant.describe(),
        "failed": failed,
        "switch_s": round(switched, 2),
        "child_s": round(marks["child_ended"] - marks["child_began"], 2) if marks else None,
        "load_after_child_s": (
            round(first + switched - marks["child_ended"], 2) if marks else None
        ),
        "idle": summary(idle),
        "during_build": summary(busy),
        "first_calls_on_variant_ms": on_variant,
        "slow_calls_s_ms": [[round(at - first, 2), round(ms, 1)] for at, ms in slow],
        "child_span_s": (
            [round(marks["child_began"] - first, 2), round(marks["child_ended"] - first, 2)]
            if marks
            else None
        ),
    }
    write(result, args.out)
    return 0 if failed is None else 1


if __name__ == "__main__":
    sys.exit(main())
