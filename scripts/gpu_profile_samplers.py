#!/usr/bin/env python3
"""Per-kernel CUDA time of the sampler implementations (torch.profiler), and the host time of
one call at batch 1, to see where the time goes on a GPU:
python scripts/gpu_profile_samplers.py [--impls triton,torch] [--batch 1024] [--vocab N]
[--scale 5] (logits N(0, scale^2); 1 gives the wide nucleus)
"""

from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from kernelpolicy.engine.resolution import _resolve_entry
from kernelpolicy.policy.names import BUILTIN_ENTRIES

PATHS = {"top_k": (50, None), "top_p": (None, 0.9), "top_k_top_p": (50, 0.9)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--impls", default="triton")
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--scale", type=float, default=5.0)
    args = parser.parse_args()
    logits = [torch.randn(args.batch, args.vocab, device="cuda") * args.scale for _ in range(3)]
    k = torch.full((args.batch,), 50, dtype=torch.int64)
    p = torch.full((args.batch,), 0.9, device="cuda")
    for impl in args.impls.split(","):
        fn = _resolve_entry(BUILTIN_ENTRIES[("sampler.top_k_top_p", impl)])
        for path, (use_k, use_p) in PATHS.items():
            kk, pp = (k if use_k else None), (p if use_p else None)
            for i in range(3):
                fn(logits[i], kk, pp)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for i in range(10):
                    fn(logits[i % 3], kk, pp)
                torch.cuda.synchronize()
            print(f"== {impl} {path} {args.batch}x{args.vocab} scale {args.scale} (10 calls)")
            table = prof.key_averages().table(
                sort_by="cuda_time_total", row_limit=6, max_name_column_width=40
            )
            print(table)
    import time

    small = torch.randn(1, args.vocab, device="cuda") * 5
    one_k, one_p = k[:1], p[:1]
    for impl in args.impls.split(","):
        fn = _resolve_entry(BUILTIN_ENTRIES[("sampler.top_k_top_p", impl)])
        for path, (use_k, use_p) in PATHS.items():
            kk, pp = (one_k if use_k else None), (one_p if use_p else None)
            for _ in range(5):
                fn(small, kk, pp)
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(100):
                fn(small, kk, pp)
            host = (time.perf_counter() - start) / 100
            torch.cuda.synchronize()
            print(f"host time per call, batch 1: {impl} {path} {host * 1e6:.0f} us")


if __name__ == "__main__":
    main()
