#!/usr/bin/env python3
"""Micro-benchmarks for a GPU visit: top-k selection variants and FlashInfer's own entry points,
at batch 1024 x vocab 128256, float32, with CUDA events (see docs/gpu.md)."""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable

import torch


def timed(fn: Callable[[], object], repeat: int = 30) -> float:
    for _ in range(3):
        fn()
    samples = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples)


def main() -> None:
    batch, vocab, k = 1024, 128256, 50
    x = torch.randn(batch, vocab, device="cuda") * 5
    out: dict[str, object] = {}
    out["topk_50"] = timed(lambda: torch.topk(x, k, dim=-1))
    out["nan_to_num"] = timed(lambda: torch.nan_to_num(x, nan=float("-inf")))
    out["argmax"] = timed(lambda: x.argmax(dim=-1))
    out["softmax"] = timed(lambda: torch.softmax(x, dim=-1))
    out["sort"] = timed(lambda: torch.sort(x, dim=-1, descending=True))

    def two_stage(chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Exact top-k: the top-k of each chunk, then the top-k of the survivors."""
        v, i = torch.topk(x.view(batch, vocab // chunk, chunk), min(k, chunk), dim=-1)
        v2, j = torch.topk(v.reshape(batch, -1), k, dim=-1)
        base = (torch.arange(vocab // chunk, device=x.device) * chunk).view(1, -1, 1)
        return v2, (i + base).reshape(batch, -1).gather(-1, j)

    for chunk in (501, 1002, 4008, 8016):  # divisors of 128256
        out[f"two_stage_topk_chunk{chunk}"] = timed(lambda c=chunk: two_stage(c))
    out["two_stage_exact"] = bool(torch.equal(torch.topk(x, k, dim=-1).values, two_stage(4008)[0]))
    try:
        import flashinfer.sampling as s

        probs = torch.softmax(x, dim=-1)
        kt = torch.full((batch,), k, device="cuda", dtype=torch.int32)
        pt = torch.full((batch,), 0.9, device="cuda")
        calls = {
            "flashinfer_top_k_from_probs": lambda: s.top_k_sampling_from_probs(probs, kt),
            "flashinfer_top_p_from_probs": lambda: s.top_p_sampling_from_probs(probs, pt),
            "flashinfer_top_k_top_p_from_logits": lambda: s.top_k_top_p_sampling_from_logits(
                x, kt, pt
            ),
        }
        for name, call in calls.items():
            out[name] = timed(call)
    except Exception as exc:  # report, do not fail the visit
        out["flashinfer_error"] = repr(exc)
    json.dump(out, sys.stdout, indent=2)


if __name__ == "__main__":
    main()
