#!/usr/bin/env python3
"""On a GPU: build the Triton sampler's kernels in parallel processes, running its conformance
checks per dtype while they build, so that later calls on this machine find every kernel in
Triton's on-disk cache (TRITON_CACHE_DIR) instead of compiling for minutes.

Jobs, one process each: the robustness checks of one dtype, the distribution checks of one
dtype (the tie and shape checks, which are float32/bfloat16 by name, with float32), and the
benchmark's shapes (every path, each vocabulary) of one dtype. Prints one line per job: checks
passed and failed (with the failed names), seconds, and whether a dtype was read as float32
after a build failure (``sampling_triton.UPCAST``). Exits 1 when a check failed.

python scripts/gpu_warm_triton.py [--dtypes float32,bfloat16,float16] [--bench-dtypes
float32,bfloat16] [--bench-vocabs 128256,151936] [--jobs 8]
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time


def _job(spec: tuple[str, str, str]) -> tuple[str, int, list[str], float, str]:
    kind, dtype_name, vocabs = spec
    import torch

    from kernelpolicy.conformance import distribution, samplers
    from kernelpolicy.kernels import sampling_triton

    dtype = getattr(torch, dtype_name)
    start = time.perf_counter()
    outcomes = []
    if kind == "robustness":
        samplers.DTYPES = (dtype,)  # type: ignore[assignment]
        outcomes = list(samplers.robustness(sampling_triton.top_k_top_p, "cuda"))
    elif kind == "distribution":
        distribution.DTYPES = (dtype,)  # type: ignore[assignment]
        if dtype != torch.float32:  # the tie and shape checks once, in the float32 job
            distribution.TIE_CASES = ()  # type: ignore[assignment]
            distribution.SHAPES = ()  # type: ignore[assignment]
            distribution.BIG_K = ()  # type: ignore[assignment]
        outcomes = list(distribution.distribution(sampling_triton.top_k_top_p, "cuda"))
    else:  # the benchmark's shapes: every path, each vocabulary, a small batch
        for vocab in (int(v) for v in vocabs.split(",")):
            logits = (torch.randn(4, vocab, device="cuda") * 5).to(dtype)
            k, p = torch.full((4,), 50), torch.full((4,), 0.9, device="cuda")
            for kk, pp in ((k, None), (None, p), (k, p), (None, None)):
                sampling_triton.top_k_top_p(logits, kk, pp)
        torch.cuda.synchronize()
    failed = [o.check for o in outcomes if not o.passed]
    upcast = sampling_triton.UPCAST.get(dtype, "")
    return (
        f"{kind}/{dtype_name}",
        len(outcomes) - len(failed),
        failed,
        time.perf_counter() - start,
        upcast,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--dtypes", default="float32,bfloat16,float16")
    parser.add_argument("--bench-dtypes", default="float32,bfloat16")
    parser.add_argument("--bench-vocabs", default="128256,151936")
    parser.add_argument("--jobs", type=int, default=8)
    args = parser.parse_args()
    specs = [
        (kind, d, "")
        for d in args.dtypes.split(",")
        if d
        for kind in ("robustness", "distribution")
    ]
    specs += [("bench", d, args.bench_vocabs) for d in args.bench_dtypes.split(",") if d]
    start = time.perf_counter()
    bad = 0
    with multiprocessing.get_context("spawn").Pool(min(args.jobs, len(specs))) as pool:
        for name, passed, failed, seconds, upcast in pool.imap_unordered(_job, specs):
            bad += len(failed)
            note = f"; read as float32 after a build failure: {upcast[:200]}" if upcast else ""
            print(
                f"{name}: {passed} passed, {len(failed)} failed {failed[:6]}"
                f" ({seconds:.0f} s){note}",
                flush=True,
            )
    print(f"warm: {time.perf_counter() - start:.0f} s in all", flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
