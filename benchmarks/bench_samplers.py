#!/usr/bin/env python3
"""Time per call of every sampler implementation that runs here, side by side, call by call.

For each (batch, vocab, dtype, logit scale, path) the implementations are called in turn,
repeat after repeat (interleaved: a clock or thermal drift hits them all alike), on inputs
rotated among three buffers so that caches do not flatter the numbers; the median is reported.
Paths: top-k (k 50), top-p (p 0.9), top-k+top-p, and greedy. The floor is reading the logits
once at the measured device-to-device copy rate (CUDA only). On the CPU, the ratio of each
implementation's top-p to its own top-k is printed too.

Usage: python benchmarks/bench_samplers.py [--device cpu|cuda] [--batches 1,32,256]
       [--vocabs 128256,151936] [--dtypes float32,bfloat16] [--scales 5,1] [--repeat N]
       [--impls torch,triton,flashinfer] [--paths top_k,top_p,...] [--json]
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

from kernelpolicy.kernels import torch_impl
from kernelpolicy.policy.names import BUILTIN_ENTRIES, PREPARE

PATHS = {"top_k": (50, None), "top_p": (None, 0.9), "top_k_top_p": (50, 0.9)}


def _loadable(impl: str, entry: str) -> Callable[..., Any] | None:
    from kernelpolicy.policy.entries import load_entry

    try:
        if impl in PREPARE:
            load_entry(PREPARE[impl])()
        return load_entry(entry)
    except Exception:  # not on this machine
        return None


def _once(fn: Callable[[], Any], device: str, calls: int = 1) -> float:
    """Seconds per call of ``calls`` calls of ``fn`` issued back to back.

    One call (the default) is the latency of a call on an idle GPU: the host's launch work is
    counted wherever the GPU waits for it. Several calls issued back to back measure what a
    serving loop sees when the host runs ahead: host work overlaps the GPU's, and each call
    costs the larger of the two.
    """
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) / 1e3 / calls
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t) / calls


def interleaved(
    calls: dict[str, Callable[[int], Any]],
    repeat: int,
    device: str,
    warmup: int = 3,
    back_to_back: int = 1,
) -> dict[str, float]:
    """Median seconds per call of each callable, called in turn, repeat after repeat (each
    sample ``back_to_back`` calls, see :func:`_once`); the warm-up calls (Triton compiles,
    FlashInfer's JIT) are not timed."""
    for i in range(warmup):
        for fn in calls.values():
            fn(i)
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for i in range(repeat):
        for name, fn in calls.items():
            samples[name].append(_once(lambda fn=fn, i=i: fn(i), device, back_to_back))
    return {name: statistics.median(s) for name, s in samples.items()}


def copy_bandwidth(device: str) -> float | None:
    """Device-to-device copy rate in GB/s, counting bytes read and written (CUDA only)."""
    if device != "cuda":
        return None
    src = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    seconds = interleaved({"copy": lambda i: dst.copy_(src)}, 20, device)["copy"]
    return 2 * src.numel() / seconds / 1e9


def _implementations(wanted: set[str] | None, feature: str) -> dict[str, Callable[..., Any]]:
    return {
        impl: fn
        for (name, impl), entry in BUILTIN_ENTRIES.items()
        if name == feature
        and (wanted is None or impl in wanted)
        and (fn := _loadable(impl, entry)) is not None
    }


def _cases(
    samplers: dict[str, Callable[..., Any]],
    greedy: dict[str, Callable[..., Any]],
    buffers: list[torch.Tensor],
    paths: list[str],
) -> dict[str, dict[str, Callable[[int], Any]]]:
    """path -> impl -> call(i)."""
    batch, device = buffers[0].shape[0], buffers[0].device
    k = torch.full((batch,), 50, dtype=torch.int64)  # on the host, as vLLM keeps it
    p = torch.full((batch,), 0.9, device=device)
    cases: dict[str, dict[str, Callable[[int], Any]]] = {}
    for path in paths:
        if path == "greedy":
            cases[path] = {
                impl: (lambda i, fn=fn: fn(buffers[i % 3])) for impl, fn in greedy.items()
            }
            continue
        use_k, use_p = PATHS[path]
        kk, pp = (k if use_k else None), (p if use_p else None)
        cases[path] = {
            impl: (lambda i, fn=fn, kk=kk, pp=pp: fn(buffers[i % 3], kk, pp))
            for impl, fn in samplers.items()
        }
    return cases


def measure(args: argparse.Namespace) -> dict[str, Any]:
    device = args.device
    wanted = set(args.impls.split(",")) if args.impls else None
    samplers = _implementations(wanted, "sampler.top_k_top_p")
    greedy = _implementations(wanted, "sampler.greedy")
    bandwidth = copy_bandwidth(device)
    rows = []
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        for scale in (float(s) for s in args.scales.split(",")):
            for batch in (int(b) for b in args.batches.split(",")):
                for vocab in (int(v) for v in args.vocabs.split(",")):
                    buffers = [
                        (torch.randn(batch, vocab, device=device) * scale).to(dtype)
                        for _ in range(3)
                    ]
                    gbytes = batch * vocab * buffers[0].element_size() / 1e9
                    floor_ms = gbytes / bandwidth * 1e3 if bandwidth else None
                    for path, calls in _cases(
                        samplers, greedy, buffers, args.paths.split(",")
                    ).items():
                        timed = interleaved(
                            calls, args.repeat, device, back_to_back=args.back_to_back
                        )
                        for impl, seconds in timed.items():
                            rows.append({
                                "impl": impl, "path": path, "batch": batch, "vocab": vocab,
                                "back_to_back": args.back_to_back,
                                "dtype": dtype_name, "scale": scale, "ms": seconds * 1e3,
                                "floor_ms": floor_ms,
                                "x_floor": seconds * 1e3 / floor_ms if floor_ms else None,
                            })  # fmt: skip
                    del buffers
    name = torch.cuda.get_device_name() if device == "cuda" else machine()
    return {
        "machine": machine(), "device": name, "copy_gb_per_s": bandwidth,
        "torch": torch.__version__, "threads": torch.get_num_threads(),
        "date": time.strftime("%Y-%m-%d"), "rows": rows,
    }  # fmt: skip


def report(result: dict[str, Any]) -> None:
    print(f"machine: {result['machine']}; device: {result['device']}; torch {result['torch']}")
    if result["copy_gb_per_s"]:
        print(f"device-to-device copy: {result['copy_gb_per_s']:.0f} GB/s (read + write)")
    header = ("impl", "path", "dtype", "scale", "batch", "vocab", "ms/call", "x floor")
    print("{:<11} {:<12} {:<9} {:>5} {:>5} {:>7} {:>10} {:>8}".format(*header))
    for r in result["rows"]:
        ratio = f"{r['x_floor']:8.1f}" if r["x_floor"] else "       -"
        print(
            f"{r['impl']:<11} {r['path']:<12} {r['dtype']:<9} {r['scale']:>5g} {r['batch']:>5} "
            f"{r['vocab']:>7} {r['ms']:>10.3f} {ratio}"
        )
    by = {(r["impl"], r["path"], r["dtype"], r["scale"], r["batch"], r["vocab"]): r["ms"]
          for r in result["rows"]}  # fmt: skip
    for (impl, path, *rest), ms in by.items():
        top_k = by.get((impl, "top_k", *rest))
        if path == "top_p" and top_k:
            print(f"{impl} top-p / own top-k at {rest}: {ms / top_k:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0], allow_abbrev=False
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batches", default="1,32,256")
    parser.add_argument("--vocabs", default="128256,151936")
    parser.add_argument("--dtypes", default="float32")
    parser.add_argument(
        "--scales", default="5",
        help="logits are N(0, scale^2); 5 gives a nucleus of ~10 tokens at p 0.9, 1 one of "
        "~60%% of the vocabulary",
    )  # fmt: skip
    parser.add_argument("--paths", default="top_k,top_p,top_k_top_p,greedy")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument(
        "--back-to-back", type=int, default=1, metavar="N",
        help="time N calls issued back to back per sample (a serving loop whose host runs "
        "ahead) instead of one call on an idle GPU (the default: latency)",
    )  # fmt: skip
    parser.add_argument("--impls", help="only these implementations (comma-separated)")
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    result = measure(args)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        report(result)


if __name__ == "__main__":
    torch.manual_seed(0)
    _ = torch_impl  # the fallbacks are always measured
    main()
