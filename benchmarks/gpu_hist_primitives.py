#!/usr/bin/env python3
"""What a histogram top-p would cost in eager torch on a CUDA device: each pass it needs, timed
alone, and the whole "find the bin holding the nucleus boundary" phase chained, in pure torch
and with the per-token work fused into one jiterator kernel (torch.cuda.jiterator, NVRTC).

The histogram: the float64 weight ``exp(x - max)`` of every token added (``index_add_``, one
atomic per token) into 16,385 bins per row of the distance to the row maximum (the distance's
float32 bits without the last 17: 64 bins per octave, monotone in the logit). This is the
phase a histogram path cannot skip; resolving the boundary bin and the draw come on top.

Usage: python benchmarks/gpu_hist_primitives.py [--out DIR] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_samplers import copy_bandwidth, interleaved

VOCAB = 128256
SHIFT = 17
BINS = 16385  # negative distances' bits >> 17 span [-16384, -64]; +0.0 gives 0: offset 16384
JIT_CODE = """
template <typename T> void hist_key(T x, T m, T base, T& w, T& idx) {
  float d = (float)x - (float)m;
  w = (T)expf(d);
  long long b = (long long)base + (long long)((__float_as_int(d) >> 17) + 16384);
  idx = __longlong_as_double(b);
}
"""


def bases(batch: int) -> torch.Tensor:
    return (torch.arange(batch, device="cuda", dtype=torch.int32) * BINS).unsqueeze(-1)


def hist_torch(x: torch.Tensor) -> torch.Tensor:
    """The boundary-bin phase's histogram in pure torch (finite, NaN-free rows)."""
    batch = x.shape[0]
    m = x.amax(dim=-1, keepdim=True)
    d = torch.sub(x, m)
    w = torch.exp(d).double()
    idx = d.view(torch.int32).bitwise_right_shift_(SHIFT).add_(bases(batch) + 16384)
    hist = torch.zeros(batch * BINS, device="cuda", dtype=torch.float64)
    hist.index_add_(0, idx.view(-1), w.view(-1))
    return hist.view(batch, BINS).cumsum(dim=-1)


def hist_jit(fn: Any, x: torch.Tensor) -> torch.Tensor:
    """The same histogram, the per-token work one fused kernel."""
    batch = x.shape[0]
    m = x.amax(dim=-1, keepdim=True).double()
    base = (bases(batch) + 0).double()
    w, idx = fn(x, m, base)
    hist = torch.zeros(batch * BINS, device="cuda", dtype=torch.float64)
    hist.index_add_(0, idx.view(torch.int64).view(-1), w.view(-1))
    return hist.view(batch, BINS).cumsum(dim=-1)


def _jit() -> tuple[Any, str]:
    try:
        from torch.cuda.jiterator import _create_multi_output_jit_fn

        fn = _create_multi_output_jit_fn(JIT_CODE, num_outputs=2)
        x = torch.randn(4, 1000, device="cuda")
        fn(x, x.amax(-1, keepdim=True).double(), torch.zeros(4, 1, device="cuda").double())
        return fn, "ok"
    except Exception as error:  # the prototype API or NVRTC may be missing
        return None, f"{type(error).__name__}: {error}"[:300]


def _calls(x: torch.Tensor, jit: Any) -> dict[str, Callable[[int], Any]]:
    batch = x.shape[0]
    m = x.amax(dim=-1, keepdim=True)
    d = torch.sub(x, m)
    w = torch.exp(d)
    w64 = w.double()
    idx = d.clone().view(torch.int32).bitwise_right_shift_(SHIFT).add_(bases(batch) + 16384)
    hist = torch.zeros(batch * BINS, device="cuda", dtype=torch.float64)
    hist32 = hist.float()
    pad = 4096 * 32 - VOCAB
    calls: dict[str, Callable[[int], Any]] = {
        "amax": lambda i: x.amax(dim=-1, keepdim=True),
        "nan_to_num": lambda i: torch.nan_to_num(x, nan=float("-inf")),
        "sub": lambda i: torch.sub(x, m),
        "exp": lambda i: torch.exp(d),
        "double()": lambda i: w.double(),
        "shift+base int32": lambda i: d.view(torch.int32) >> SHIFT,
        "index_add_ f64": lambda i: hist.zero_().index_add_(0, idx.view(-1), w64.view(-1)),
        "index_add_ f32": lambda i: hist32.zero_().index_add_(0, idx.view(-1), w.view(-1)),
        "cumsum hist": lambda i: hist.view(batch, BINS).cumsum(dim=-1),
        "hist (torch)": lambda i: hist_torch(x),
        "topk 50": lambda i: torch.topk(x, 50),
        "sort blocks 4008": lambda i: x.view(batch, 32, 4008).sort(dim=-1),
        "pad+sort blocks 4096": lambda i: (
            torch.nn.functional.pad(x, (0, pad)).view(batch, 32, 4096).sort(dim=-1)
        ),
    }
    if jit is not None:
        md, zero = m.double(), torch.zeros(batch, 1, device="cuda", dtype=torch.float64)
        calls["jit key pass"] = lambda i: jit(x, md, zero)
        calls["hist (jit)"] = lambda i: hist_jit(jit, x)
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0], allow_abbrev=False
    )
    parser.add_argument("--out", default=".")
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    torch.manual_seed(0)
    bandwidth = copy_bandwidth("cuda") or 1.0
    jit, jit_status = _jit()
    print("jiterator", jit_status, flush=True)
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"), "copy_gb_per_s": bandwidth, "jiterator": jit_status,
        "rows": [],
    }  # fmt: skip
    for scale in (1.0, 5.0):
        for batch in (256, 1024):
            x = torch.randn(batch, VOCAB, device="cuda") * scale
            floor = batch * VOCAB * 4 / bandwidth / 1e6
            if jit is not None:  # the fused pass's weights against torch.exp, bit for bit
                w, _ = jit(
                    x, x.amax(-1, keepdim=True).double(), torch.zeros_like(x[:, :1]).double()
                )
                ref = torch.exp(x - x.amax(-1, keepdim=True))
                result.setdefault("jit_weight_mismatches", []).append(int((w.float() != ref).sum()))
                same = torch.allclose(hist_jit(jit, x), hist_torch(x), rtol=1e-12, atol=1e-12)
                result.setdefault("jit_hist_equal", []).append(bool(same))
            for name, sec in interleaved(_calls(x, jit), args.repeat, "cuda").items():
                row = {"scale": scale, "batch": batch, "op": name, "ms": sec * 1e3,
                       "x_floor": sec * 1e3 / floor}  # fmt: skip
                result["rows"].append(row)
                print(f"{scale:>3} {batch:>5} {name:<22} {row['ms']:8.3f} ms "
                      f"{row['x_floor']:6.1f}x", flush=True)  # fmt: skip
    print("jit checks", result.get("jit_weight_mismatches"), result.get("jit_hist_equal"))
    Path(args.out, "hist_primitives.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
