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
``--trace-ms MS`` also records, on the threads the build starts, every C call (a builtin or an
extension's function) that lasted MS or more, with when it began: the calls that hold the
interpreter's lock, or a lock of the CUDA driver, while the serving thread waits (and the
Python functions, imports by name, of four times that). ``--triton-first`` launches a kernel of
its own first, as an inference engine that uses Triton has before it serves; ``--prefetch``
makes the sampler's prefetch first, as ``impl()`` does.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import threading
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
    parser.add_argument("--trace-ms", type=float, default=0.0, help="record C calls this long")
    parser.add_argument(
        "--prefetch",
        action="store_true",
        help="make the sampler's prefetch first, as impl() does on its background thread",
    )
    parser.add_argument(
        "--triton-first",
        action="store_true",
        help="launch a Triton kernel of the benchmark's own first, as an engine that uses "
        "Triton has done before it serves (Triton's imports and its own key paid then)",
    )
    return parser.parse_args()


class CCalls:
    """A profile function for other threads: the C calls of at least ``ms`` milliseconds, and
    the Python functions (an import: with the module's name) of at least four times that."""

    def __init__(self, ms: float) -> None:
        self.seconds = ms / 1e3
        self.open: dict[int, list[float]] = {}
        self.long: list[tuple[float, float, str]] = []  # (began, seconds, name)

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event in ("c_call", "call"):
            self.open.setdefault(id(frame) * 2 + (event == "call"), []).append(time.perf_counter())
            return
        python = event == "return"
        began = self.open.get(id(frame) * 2 + python, [])
        if not began:
            return
        start = began.pop()
        took = time.perf_counter() - start
        if took < self.seconds * (4 if python else 1):
            return
        where = f"{frame.f_code.co_filename.rsplit('/', 2)[-1]}:{frame.f_lineno}"
        if python:
            name = frame.f_code.co_name
            if name == "_find_and_load":
                name = f"import {frame.f_locals.get('name')}"
        else:
            name = getattr(arg, "__qualname__", None) or repr(arg)[:60]
        self.long.append((start, took, f"{name} ({where})"))

    def rows(self, first: float) -> list[list[object]]:
        """Each long call: when it began (seconds from ``first``), its milliseconds, what."""
        return [[round(at - first, 3), round(took * 1e3, 1), name] for at, took, name in self.long]


def write(result: dict[str, Any], out: Path | None) -> None:
    print(json.dumps(result))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        with (out / "build_stall.jsonl").open("a") as f:
            f.write(json.dumps(result) + "\n")


def engine_kernel() -> None:
    """One Triton kernel launched, as an inference engine launches its own before serving."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def double(x_ptr, n, block: tl.constexpr):  # type: ignore[no-untyped-def]
        i = tl.program_id(0) * block + tl.arange(0, block)
        tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) * 2, mask=i < n)

    x = torch.ones(1000, device="cuda:0")
    double[(1,)](x, 1000, block=1024)
    torch.cuda.synchronize()


def before_serving(args: argparse.Namespace) -> None:
    """What the process did before it served: an engine's own Triton kernel, ``impl()``'s
    prefetch."""
    if args.triton_first:
        engine_kernel()
    if args.prefetch:
        from kernelpolicy.kernels.sampling_triton import prefetch

        prefetch()


def main() -> int:
    args = arguments()
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="kp-stall-")  # cold: nothing built
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import torch

    from kernelpolicy.kernels import torch_impl
    from kernelpolicy.kernels.builds import Compiling
    from kernelpolicy.kernels.sampling_triton import Sampler
    from kernelpolicy.kernels.sampling_triton.child import Child

    before_serving(args)
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
    traced = CCalls(args.trace_ms) if args.trace_ms else None

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
    threading.setprofile(traced)  # the build's threads, started from here on (None: off)
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
        "triton_first": args.triton_first,
        "prefetch": args.prefetch,
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
        "long_c_calls_s_ms": traced.rows(first) if traced is not None else None,
    }
    write(result, args.out)
    return 0 if failed is None else 1


if __name__ == "__main__":
    sys.exit(main())
