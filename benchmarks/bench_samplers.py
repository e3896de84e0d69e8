#!/usr/bin/env python3
"""Time per call of every sampler implementation that runs here, with effective GB/s.

Batch 1, 32, 256 (add 1024 on a GPU) x vocab 32000, 128256, 151936, float32 logits, k 50,
p 0.9, on the paths top-k, top-p, top-k+top-p and greedy. Inputs rotate among several buffers so
that caches do not flatter the numbers; the median of the repeats is reported. GB/s counts the
logits read once (batch x vocab x 4 bytes), the floor any sampler pays. On CUDA, timing uses
CUDA events.

Usage: python benchmarks/bench_samplers.py [--device cpu|cuda] [--batches 1,32,256]
       [--vocabs 32000,128256,151936] [--repeat N] [--impls torch,triton] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import machine

from kernelpolicy.conformance.suite import run_one  # noqa: F401 - importable means torch works here
from kernelpolicy.kernels import torch_impl
from kernelpolicy.policy.names import BUILTIN_ENTRIES, PREPARE

PATHS = {"top_k": (50, None), "top_p": (None, 0.9), "top_k_top_p": (50, 0.9)}


def _loadable(impl: str, entry: str) -> Callable[..., Any] | None:
    from kernelpolicy.engine.resolution import _resolve_entry

    try:
        if impl in PREPARE:
            _resolve_entry(PREPARE[impl])()
        return _resolve_entry(entry)
    except Exception:  # not on this machine
        return None


def _time(fn: Callable[[int], Any], repeat: int, device: str) -> float:
    for i in range(3):
        fn(i)  # warm-up (and JIT builds, on a GPU)
    samples = []
    for i in range(repeat):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(i)
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        else:
            t = time.perf_counter()
            fn(i)
            samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def copy_bandwidth(device: str) -> float | None:
    """Device-to-device copy rate in GB/s, counting bytes read and written (CUDA only)."""
    if device != "cuda":
        return None
    src = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    seconds = _time(lambda i: dst.copy_(src), 20, device)
    return 2 * src.numel() / seconds / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batches", default="1,32,256")
    parser.add_argument("--vocabs", default="32000,128256,151936")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--impls", help="only these implementations (comma-separated)")
    parser.add_argument(
        "--scale", type=float, default=5.0,
        help="logits are N(0, scale^2); 5 gives a nucleus of ~10 tokens at p 0.9, 1 one of "
        "~60%% of the vocabulary",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    device = args.device
    wanted = set(args.impls.split(",")) if args.impls else None

    def loaded(name: str) -> dict[str, Callable[..., Any]]:
        return {
            impl: fn
            for (feature, impl), entry in BUILTIN_ENTRIES.items()
            if feature == name
            and (wanted is None or impl in wanted)
            and (fn := _loadable(impl, entry)) is not None
        }

    samplers = loaded("sampler.top_k_top_p")
    greedy = loaded("sampler.greedy")
    # The output guard's cost, beside the same kernel unguarded.
    from kernelpolicy.kernels.guards import ClampTokenIds

    for impl in list(greedy):
        greedy[f"{impl}+clamp"] = ClampTokenIds(greedy[impl])
    bandwidth = copy_bandwidth(device)
    rows = []
    for batch in (int(b) for b in args.batches.split(",")):
        for vocab in (int(v) for v in args.vocabs.split(",")):
            buffers = [torch.randn(batch, vocab, device=device) * args.scale for _ in range(3)]
            gbytes = batch * vocab * 4 / 1e9
            k = torch.full((batch,), 50, dtype=torch.int64)
            p = torch.full((batch,), 0.9, device=device)
            cases: list[tuple[str, str, Callable[[int], Any]]] = []
            for impl, fn in samplers.items():
                for path, (use_k, use_p) in PATHS.items():
                    kk, pp = (k if use_k else None), (p if use_p else None)
                    cases.append(
                        (impl, path, lambda i, fn=fn, kk=kk, pp=pp, b=buffers: fn(b[i % 3], kk, pp))
                    )
            for impl, fn in greedy.items():
                cases.append((impl, "greedy", lambda i, fn=fn, b=buffers: fn(b[i % 3])))
            for impl, path, call in cases:
                seconds = _time(call, args.repeat, device)
                floor_ms = gbytes / bandwidth * 1e3 if bandwidth else None
                rows.append({
                    "impl": impl, "path": path, "batch": batch, "vocab": vocab,
                    "ms": seconds * 1e3, "gb_per_s": gbytes / seconds,
                    "floor_ms": floor_ms,
                    "x_floor": seconds * 1e3 / floor_ms if floor_ms else None,
                })  # fmt: skip
    if args.json:
        name = torch.cuda.get_device_name() if device == "cuda" else machine()
        print(json.dumps({"machine": machine(), "device": name, "copy_gb_per_s": bandwidth,
                          "scale": args.scale,
                          "torch": torch.__version__, "rows": rows}, indent=2))  # fmt: skip
        return
    print(f"machine: {machine()}; device: {device}; torch {torch.__version__}")
    if bandwidth:
        print(f"device-to-device copy: {bandwidth:.0f} GB/s (read + write); floor = logits / that")
    header = ("impl", "path", "batch", "vocab", "ms/call", "GB/s", "x floor")
    print("{:<12} {:<12} {:>5} {:>7} {:>10} {:>8} {:>8}".format(*header))
    for r in rows:
        ratio = f"{r['x_floor']:8.1f}" if r["x_floor"] else "       -"
        print(
            f"{r['impl']:<12} {r['path']:<12} {r['batch']:>5} {r['vocab']:>7} "
            f"{r['ms']:>10.3f} {r['gb_per_s']:>8.2f} {ratio}"
        )


if __name__ == "__main__":
    torch.manual_seed(0)
    _ = torch_impl  # the fallbacks are always measured
    main()
