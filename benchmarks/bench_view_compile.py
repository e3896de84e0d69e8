#!/usr/bin/env python3
"""Does a built variant of the Triton sampler compile again when called through a view, and did
the fix (an unspecialised row stride, ``launch.row_stride``) change its speed on contiguous
logits? Three forms of the same kernels, in one process on one GPU:

* ``specialized``: the row stride passed whole and specialised by Triton (as before the fix);
* ``unspecialized``: passed whole with ``do_not_specialize`` (the plain alternative);
* ``package``: the package's launches (the stride in units of 16 where the vocabulary allows).

``--phase build`` compiles one form's contiguous variants (run the three at once to fill
``TRITON_CACHE_DIR``); ``--phase measure`` times contiguous calls of each form (back to back,
median of ``--repeat`` samples) and the first calls through views, counting the kernels each
view's call added to Triton's in-memory caches (a compile, the build having filled the disk
cache). Prints one JSON line per row.

    python benchmarks/bench_view_compile.py --phase build --form package &  # each form
    python benchmarks/bench_view_compile.py --phase measure
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import triton

from kernelpolicy.kernels.sampling_triton import Kernels, Sampler, jit

FORMS = ("specialized", "unspecialized", "package")
VOCABS = (128256, 32001)
K = 50


class _Whole:
    """A kernel launched with its row stride whole (``STRIDE_UNIT`` 1), as before the fix."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel

    def __getitem__(self, grid: object) -> Callable[..., Any]:
        def launch(**kwargs: Any) -> Any:
            kwargs["stride"] *= kwargs["STRIDE_UNIT"]
            kwargs["STRIDE_UNIT"] = 1
            return self.kernel[grid](**kwargs)

        return launch


def kernels_of(form: str) -> Kernels:
    real = Kernels()
    if form == "package":
        return real
    whole = {}
    for name in jit.names():
        kernel = getattr(real, name)
        if "stride" in kernel.arg_names:
            whole[name] = _Whole(triton.jit(kernel.fn) if form == "specialized" else kernel)
    return real.replace(**whole)


def compiled(sampler: Sampler) -> int:
    """Kernels in Triton's in-memory caches of the sampler's kernels (every device)."""
    total = 0
    for name in jit.names():
        kernel = getattr(sampler.kernels, name)
        kernel = kernel.kernel if isinstance(kernel, _Whole) else kernel
        total += sum(len(caches[0]) for caches in kernel.device_caches.values())
    return total


def call(sampler: Sampler, x: torch.Tensor) -> float:
    k = torch.full((x.shape[0],), K, device=x.device)
    start = time.perf_counter()
    sampler(x, k, None, k_max=K)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def timed(sampler: Sampler, x: torch.Tensor, repeat: int, back_to_back: int = 20) -> float:
    """Median microseconds a call, back to back."""
    k = torch.full((x.shape[0],), K, device=x.device)
    for _ in range(5):
        sampler(x, k, None, k_max=K)
    samples = []
    for _ in range(repeat):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(back_to_back):
            sampler(x, k, None, k_max=K)
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) / back_to_back * 1e6)
    return statistics.median(samples)


def views(vocab: int) -> dict[str, torch.Tensor]:
    padded = -(-vocab // 64) * 64 + (64 if vocab % 64 == 0 else 0)
    return {
        "padded": torch.randn(8, padded, device="cuda")[:, :vocab],
        "row_offset": torch.randn(9, vocab, device="cuda")[1:],
        "odd_stride": torch.randn(8, vocab + 1, device="cuda")[:, :vocab],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--phase", choices=("build", "measure"), required=True)
    parser.add_argument("--form", choices=FORMS)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--batches", default="1,32,256")
    args = parser.parse_args()
    device = torch.cuda.get_device_name()
    forms = [args.form] if args.form else list(FORMS)
    samplers = {form: Sampler(kernels=kernels_of(form), cache=lambda: None) for form in forms}
    for form, sampler in samplers.items():
        for vocab in VOCABS:
            seconds = call(sampler, torch.randn(1, vocab, device="cuda"))
            print(json.dumps({"row": "build", "form": form, "vocab": vocab, "s": seconds}))
    if args.phase == "build":
        return
    batches = [int(b) for b in args.batches.split(",") if b]
    for vocab in VOCABS:
        for batch in batches:
            x = torch.randn(batch, vocab, device="cuda")
            for form in FORMS:  # interleaved, same inputs
                us = timed(samplers[form], x, args.repeat)
                row = {"row": "contiguous", "form": form, "vocab": vocab, "batch": batch}
                print(json.dumps({**row, "us": round(us, 1), "device": device}), flush=True)
    for form in [f for f in ("package", "specialized") if f in samplers]:
        # before the fix: one compiling view suffices
        for vocab in VOCABS if form == "package" else VOCABS[1:]:
            for name, x in views(vocab).items():
                if form == "specialized" and name != "padded":
                    continue
                before = compiled(samplers[form])
                calls = [round(call(samplers[form], x), 4) for _ in range(3)]
                row = {"row": "view", "form": form, "vocab": vocab, "view": name}
                added = compiled(samplers[form]) - before
                print(json.dumps({**row, "calls_s": calls, "compiled": added}), flush=True)


if __name__ == "__main__":
    main()
