#!/usr/bin/env python3
"""On a GPU: build and call the Triton sampler for every dtype and path (small shapes), and say
whether each dtype ran natively or was read as float32 after a compile failure."""

from __future__ import annotations

import time

import torch

from kernelpolicy.kernels import sampling_triton


def main() -> None:
    for dtype in (torch.bfloat16, torch.float16):  # float32 builds (verify shows it)
        logits = (torch.randn(8, 128256, device="cuda") * 5).to(dtype)
        k = torch.full((8,), 50)
        p = torch.full((8,), 0.9, device="cuda")
        for path, (kk, pp) in {
            "k": (k, None),
            "p": (None, p),
            "kp": (k, p),
            "-": (None, None),
        }.items():
            start = time.perf_counter()
            try:
                ids = sampling_triton.top_k_top_p(logits, kk, pp)
                torch.cuda.synchronize()
                result = f"ok {ids[:4].tolist()}"
            except Exception as exc:
                result = f"RAISED {type(exc).__name__}: {str(exc)[:400]}"
            print(f"{dtype} {path}: {time.perf_counter() - start:.1f} s {result}")
        print(f"{dtype} read as float32 after a failure: {sampling_triton.UPCAST.get(dtype)}")


if __name__ == "__main__":
    main()
