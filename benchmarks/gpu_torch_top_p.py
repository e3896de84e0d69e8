#!/usr/bin/env python3
"""The torch top-p on a CUDA device: the sorted-blocks search against the full sort it replaced,
in one run, with its exactness checked against that sort.

For each dtype, logit scale and batch (vocab 128256), every call is timed interleaved with the
others (``bench_samplers.interleaved``): the full-sort top-p (a stable sort of every row, the
path before 2026-11-23), the sorted-blocks top-p at several (block, probes) settings, and the
torch top-k and top-k + top-p paths for context. The floor is reading the logits once at the
measured copy rate. Then, per setting, the kept set of every row is compared with the sort's,
the draw is checked as a quadrature on tie-heavy rows, and the time of each phase is taken.

Usage: BATCHES=1,32,256,1024 python benchmarks/gpu_torch_top_p.py [--out DIR] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_samplers import copy_bandwidth, interleaved

from kernelpolicy.kernels import torch_sampling as sampling
from kernelpolicy.kernels.torch_impl import top_k_top_p
from kernelpolicy.kernels.torch_sampling import blocks
from kernelpolicy.verify.reference import filtered_probs

VOCAB = int(os.environ.get("VOCAB", "128256"))
SETTINGS = [(4096, 255), (4096, 15)]
BATCHES = [int(b) for b in os.environ.get("BATCHES", "1,32,256,1024").split(",")]


def sort_top_p(logits: torch.Tensor, p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Top-p by a full stable sort of every row (the reference and the old path)."""
    values, ids = sampling.prepare(logits).sort(dim=-1, descending=True, stable=True)
    w, _ = sampling.weights(values)
    w = w.masked_fill(sampling.top_p_mask_sorted(w, p), 0.0)
    return ids.gather(-1, sampling.draw(w, u).unsqueeze(-1)).squeeze(-1)


def sort_kept(logits: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    values, ids = sampling.prepare(logits).sort(dim=-1, descending=True, stable=True)
    w, _ = sampling.weights(values)
    kept = ~sampling.top_p_mask_sorted(w, p) & (w > 0)
    return torch.zeros_like(kept).scatter_(1, ids, kept)


def padded(logits: torch.Tensor, p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The sorted blocks as before 2026-11-26: blocks of 4,096, the last one padded."""
    with mock.patch.object(blocks, "block_size", min):
        return blocks.top_p(logits, p, u, block=4096, probes=15)


def _calls(bufs: list[torch.Tensor]) -> dict[str, Callable[[int], Any]]:
    batch = bufs[0].shape[0]
    p = torch.full((batch,), 0.9, device="cuda")
    k = torch.full((batch,), 50, dtype=torch.int64)  # on the host, as vLLM keeps it
    u = torch.rand(batch, 1, device="cuda", dtype=torch.float64)
    calls: dict[str, Callable[[int], Any]] = {
        "full sort": lambda i: sort_top_p(bufs[i % 3], p, u),
        "top_k": lambda i: top_k_top_p(bufs[i % 3], k, None),
        "top_k_top_p": lambda i: top_k_top_p(bufs[i % 3], k, p),
        "top_p (default)": lambda i: top_k_top_p(bufs[i % 3], None, p),
    }
    calls["blocks 4096/15 padded"] = lambda i: padded(bufs[i % 3], p, u)
    for block, probes in SETTINGS:
        calls[f"blocks {block}/{probes}"] = lambda i, b=block, q=probes: blocks.top_p(
            bufs[i % 3], p, u, block=b, probes=q
        )
    return calls


def timings(repeat: int, bandwidth: float) -> list[dict[str, Any]]:
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        for scale in (5.0, 1.0):
            for batch in BATCHES:
                bufs = [
                    (torch.randn(batch, VOCAB, device="cuda") * scale).to(dtype) for _ in range(3)
                ]
                floor = batch * VOCAB * bufs[0].element_size() / bandwidth / 1e6
                for name, sec in interleaved(_calls(bufs), repeat, "cuda").items():
                    row = {
                        "dtype": str(dtype).removeprefix("torch."), "scale": scale,
                        "batch": batch, "path": name, "ms": sec * 1e3,
                        "floor_ms": floor, "x_floor": sec * 1e3 / floor,
                    }  # fmt: skip
                    rows.append(row)
                    print(f"{row['dtype']:<9} {scale:>3} {batch:>5} {name:<18} "
                          f"{row['ms']:8.3f} ms {row['x_floor']:7.1f}x", flush=True)  # fmt: skip
                del bufs
    return rows


def exactness() -> list[dict[str, Any]]:
    """Kept sets against the full sort, per setting, on rows with and without many ties."""
    out = []
    gen = torch.Generator(device="cuda").manual_seed(1)
    cases = {
        "N(0,25) f32": torch.randn(256, VOCAB, device="cuda", generator=gen) * 5,
        "N(0,1) f32": torch.randn(256, VOCAB, device="cuda", generator=gen),
        "N(0,1) bf16": torch.randn(256, VOCAB, device="cuda", generator=gen).bfloat16(),
        "N(0,9) bf16": (torch.randn(256, VOCAB, device="cuda", generator=gen) * 3).bfloat16(),
    }
    ps = torch.tensor([0.9, 0.5, 0.99, 1.0, 0.3, 0.999], device="cuda").repeat(43)[:256]
    for name, logits in cases.items():
        ref = sort_kept(logits, ps)
        for block, probes in SETTINGS:
            got = blocks.kept_mask(logits, ps, block=block, probes=probes)
            diff = (got != ref).sum(dim=-1)
            out.append({
                "case": name, "block": block, "probes": probes,
                "rows_differing": int((diff > 0).sum()), "max_tokens_differing": int(diff.max()),
                "kept_mean": float(ref.sum(-1).float().mean()),
            })  # fmt: skip
            print("exact", out[-1], flush=True)
    return out


def quadrature() -> list[dict[str, Any]]:
    """An even grid of uniforms over copies of one row: each kept token drawn within one of
    rows * probability times, nothing outside the kept set."""
    out = []
    tie = torch.full((1, 16384), -30.0)
    tie[0, :5000], tie[0, 5000:10000] = 1.0, 0.0
    rows_cases = {
        "tied group across the cut": (tie, 0.5),
        "bf16-rounded N(0,9)": ((torch.randn(1, 4096) * 3).bfloat16().float(), 0.7),
        "N(0,1) wide": (torch.randn(1, 4096), 0.9),
    }
    n = 4000
    u = ((torch.arange(n, dtype=torch.float64, device="cuda") + 0.5) / n).unsqueeze(-1)
    for name, (row, p) in rows_cases.items():
        expected = filtered_probs(row, None, p)[0]
        x = row.cuda().expand(n, -1).contiguous()
        for block, probes in [(512, 255), (4096, 15)]:
            ids = blocks.top_p(x, torch.full((n,), p, device="cuda"), u, block=block, probes=probes)
            counts = torch.bincount(ids.cpu(), minlength=expected.numel()).double()
            outside = int(counts[expected == 0].sum())
            worst = float((counts - expected * n).abs().max())
            ok = outside == 0 and worst <= 1 + 1e-3 * n
            out.append({"case": name, "block": block, "probes": probes, "outside": outside,
                        "worst_draws_off": worst, "ok": ok})  # fmt: skip
            print("quadrature", out[-1], flush=True)
    return out


def phases() -> dict[str, float]:
    """Milliseconds of each phase of the default setting at 1024 x 128256 float32, N(0, 1)."""
    x = torch.randn(1024, VOCAB, device="cuda")
    p = torch.full((1024,), 0.9, device="cuda")
    u = torch.rand(1024, 1, device="cuda", dtype=torch.float64)
    result: dict[str, float] = {}

    def clock(name: str, fn: Callable[[], Any]) -> Any:
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        host = time.perf_counter()
        start.record()
        value = fn()
        end.record()
        result[name + " host ms"] = (time.perf_counter() - host) * 1e3
        end.synchronize()
        result[name + " ms"] = start.elapsed_time(end)
        return value

    for c in (1024, 2048, 4096):
        xc = x[:, : VOCAB // c * c].reshape(1024, -1, c)
        clock(f"sort blocks of {c}", lambda xc=xc: xc.sort(dim=-1))
    b = clock("sorted_blocks", lambda: blocks.sorted_blocks(x))
    nu = clock("nucleus", lambda: blocks.nucleus(b, p))
    clock("draw", lambda: blocks.draw(b, nu, u))
    clock("topk 50", lambda: torch.topk(x, 50))
    clock("full sort", lambda: x.sort(dim=-1))
    print("phases", result, flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0], allow_abbrev=False
    )
    parser.add_argument("--out", default=".")
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    torch.manual_seed(0)
    bandwidth = copy_bandwidth("cuda") or 1.0
    print("device", torch.cuda.get_device_name(), "copy GB/s", round(bandwidth), flush=True)
    result = {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"), "copy_gb_per_s": bandwidth,
        "exactness": exactness(), "quadrature": quadrature(), "phases": phases(),
    }  # fmt: skip
    result["rows"] = timings(args.repeat, bandwidth)
    Path(args.out, "torch_top_p.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
