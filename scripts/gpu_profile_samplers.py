#!/usr/bin/env python3
"""Where a sampler call's time goes on a GPU: per batch, path and logits scale, the host time of
one call (calls issued without a synchronisation), its latency on an idle GPU, its time when
issued back to back, and the CUDA kernels it runs (torch.profiler, graph replays included);
then a Python profile of the host work of one batch-1 call.

    python scripts/gpu_profile_samplers.py [--impls triton] [--batches 1,32,256,1024]
        [--vocab 128256] [--scales 5,1] [--paths top_k,top_p,top_k_top_p] [--kernels]
        [--python] [--set W_BLOCK=8192 ...] [--versus W_BLOCK=4096 ...] [--timeline DIR]

Logits are N(0, scale^2); scale 1 gives the wide nucleus. k 50 on the host, p 0.9 on the GPU,
as vLLM keeps them. ``--versus`` times every triton case a second time with other constants,
sample by sample in turn with the first (an A/B on one machine, sharing its drift); each
setting keeps its own captured graphs and work buffers. ``--timeline`` prints one idle-GPU
call's host CUDA calls and GPU kernels in time order.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from kernelpolicy.policy.entries import load_entry
from kernelpolicy.policy.names import BUILTIN_ENTRIES

# the paths and the CUDA-event timing of benchmarks/bench_samplers.py, so that "idle-GPU
# latency" and "back to back" mean here what they mean in its tables
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_samplers import PATHS, _once


def _host(fn: Callable[[], Any], calls: int) -> float:
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    seconds = time.perf_counter() - t
    torch.cuda.synchronize()
    return seconds * 1e6 / calls


def _timings(
    fn: Callable[[], Any], settings: list[Callable[[], None]] | None = None
) -> list[tuple[float, float, float]]:
    """(host us, idle-GPU latency us, back-to-back us per call), medians of 7, for each of
    ``settings`` (functions applying one set of constants), sample by sample in turn so that
    they share the machine's drift; one entry for the constants as they are without them."""
    settings = settings or [lambda: None]
    samples: list[list[tuple[float, float, float]]] = [[] for _ in settings]
    for _ in range(7):
        for apply, own in zip(settings, samples, strict=True):
            apply()
            own.append((_host(fn, 20), _once(fn, "cuda") * 1e6, _once(fn, "cuda", 10) * 1e6))
    return [
        (
            statistics.median(s[0] for s in own),
            statistics.median(s[1] for s in own),
            statistics.median(s[2] for s in own),
        )
        for own in samples
    ]


def _kernels(fn: Callable[[], Any]) -> str:
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
    return str(
        prof.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=48)
    )


TIMELINE_CATEGORIES = {"cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy", "gpu_memset"}


def _timeline(fn: Callable[[], Any], trace: Path) -> str:
    """One call on an idle GPU under torch.profiler: the host's CUDA calls and the GPU's
    kernels and copies in time order, in us from the first (where the GPU waits on the host
    shows as a gap between kernels while the host is still launching)."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    prof.export_chrome_trace(str(trace))
    events = [
        e
        for e in json.loads(trace.read_text()).get("traceEvents", [])
        if e.get("cat") in TIMELINE_CATEGORIES and "ts" in e
    ]
    if not events:
        return "(no events)"
    t0 = min(float(e["ts"]) for e in events)
    lines = []
    for e in sorted(events, key=lambda e: float(e["ts"])):
        side = "host" if e["cat"].startswith("cuda_") else "GPU "
        start, dur = float(e["ts"]) - t0, float(e.get("dur", 0))
        lines.append(f"  {side} {start:8.1f} +{dur:7.1f}  {str(e.get('name', ''))[:60]}")
    return "\n".join(lines)


def _rotating(
    fn: Callable[..., Any], logits: list[torch.Tensor], k: Any, p: Any
) -> Callable[[], Any]:
    """A call of ``fn`` on the next of ``logits`` each time (a serving loop's few addresses)."""
    state = {"i": 0}

    def call() -> Any:
        state["i"] += 1
        return fn(logits[state["i"] % len(logits)], k, p)

    return call


def _tuning(parser: argparse.ArgumentParser, items: list[str], base: Any) -> Any:
    """``base`` (a sampling_triton.Tuning) with NAME=INT settings (a field name, in any case;
    checked now: an unknown name is an error)."""
    from kernelpolicy.kernels.sampling_triton.tuning import field_names

    changes = {}
    for item in items:
        name, _, value = item.partition("=")
        if name.lower() not in field_names():
            parser.error(f"--set/--versus: the Triton sampler has no constant {name}")
        try:
            changes[name.lower()] = int(value)
        except ValueError:
            parser.error(f"--set/--versus: {item!r} is not NAME=INT")
    return base.replace(**changes)


def _settings(
    parser: argparse.ArgumentParser, fixed: list[str], versus: list[str]
) -> tuple[list[Callable[[], None]], Callable[..., Any]]:
    """The Triton sampler timed with --set, and with --versus a second one (--set, then
    --versus on top); returns a function per sampler that makes it the one the returned
    sampling function calls. Each sampler keeps its own captured graphs and work buffers: a
    graph bakes in the constants it was captured with."""
    from kernelpolicy.kernels.sampling_triton import Sampler, Tuning

    tunings = [_tuning(parser, fixed, Tuning())]
    if fixed:
        print("settings:", " ".join(fixed))
    if versus:
        tunings.append(_tuning(parser, versus, tunings[0]))
        print("versus:", " ".join(versus))
    samplers = [Sampler(tuning) for tuning in tunings]
    current = [samplers[0]]

    def sample(*args: Any, **kwargs: Any) -> Any:
        return current[0](*args, **kwargs)

    def use(i: int) -> Callable[[], None]:
        return lambda: current.__setitem__(0, samplers[i])

    return [use(i) for i in range(len(samplers))], sample


def _python_profile(fns: dict[str, Callable[..., Any]], vocab: int) -> None:
    """A Python profile of the host work of 300 batch-1 top-k+top-p calls per impl."""
    small = torch.randn(1, vocab, device="cuda") * 5
    k1, p1 = torch.full((1,), 50, dtype=torch.int64), torch.full((1,), 0.9, device="cuda")
    for impl, fn in fns.items():
        for _ in range(5):
            fn(small, k1, p1)
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(300):
            fn(small, k1, p1)
        prof.disable()
        torch.cuda.synchronize()
        print(f"== host profile, {impl}, top_k_top_p, batch 1, 300 calls")
        pstats.Stats(prof).sort_stats("tottime").print_stats(18)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--impls", default="triton")
    parser.add_argument("--batches", default="1,32,256,1024")
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--scales", default="5,1")
    parser.add_argument("--kernels", action="store_true", help="print each case's kernel table")
    parser.add_argument("--python", action="store_true", help="profile the host work at batch 1")
    parser.add_argument(
        "--timeline",
        type=Path,
        metavar="DIR",
        help="print each case's timeline of one call on an idle GPU (host CUDA calls, GPU "
        "kernels), and write its Chrome trace to DIR",
    )
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument(
        "--dtype",
        default="float32",
        choices=["float32", "bfloat16", "float16"],
        help="the logits' dtype (drawn in float32, then converted)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=INT",
        help="override a tuning constant of the Triton sampler (e.g. W_BLOCK=8192); repeatable",
    )
    parser.add_argument(
        "--versus",
        action="append",
        default=[],
        metavar="NAME=INT",
        help="also time every case with these constants (on top of --set), sample by sample "
        "in turn with the --set ones; printed as a second line marked 'versus'; repeatable",
    )
    args = parser.parse_args()
    if args.timeline:
        args.timeline.mkdir(parents=True, exist_ok=True)
    settings, triton_sample = _settings(parser, args.set, args.versus)
    fns = {
        impl: triton_sample
        if impl == "triton"
        else load_entry(BUILTIN_ENTRIES[("sampler.top_k_top_p", impl)])
        for impl in args.impls.split(",")
    }
    print("impl path batch scale: host us | idle-GPU latency us | back-to-back us per call")
    logits: list[torch.Tensor] = []
    for scale in (float(s) for s in args.scales.split(",")):
        for batch in (int(b) for b in args.batches.split(",")):
            dtype = getattr(torch, args.dtype)
            # the last case's buffers go first, so that one of this shape lands where they
            # were: a serving loop's few addresses, not three more per case (the sampler
            # caps its in-place graphs per shape: Tuning.in_place_captures)
            logits.clear()
            logits += [
                (torch.randn(batch, args.vocab, device="cuda") * scale).to(dtype) for _ in range(3)
            ]
            k = torch.full((batch,), 50, dtype=torch.int64)
            p = torch.full((batch,), 0.9, device="cuda")
            for path in args.paths.split(","):
                use_k, use_p = PATHS[path]
                kk, pp = (k if use_k else None), (p if use_p else None)
                for impl, fn in fns.items():
                    call = _rotating(fn, logits, kk, pp)
                    for _ in range(4):
                        call()
                    timings = _timings(call, settings if impl == "triton" else None)
                    for mark, (host, idle, b2b) in zip(("", " versus"), timings, strict=False):
                        print(
                            f"{impl}{mark} {path} {batch} {scale:g}: "
                            f"{host:.1f} | {idle:.1f} | {b2b:.1f}"
                        )
                    if args.kernels:  # with the --set constants alone
                        settings[0]()
                        print(_kernels(call), flush=True)
                    if args.timeline:
                        for apply, mark in zip(settings, ("", "versus "), strict=False):
                            apply()
                            trace = args.timeline / f"{impl}-{mark}{path}-{batch}-{scale:g}.json"
                            print(f"timeline {mark}{impl} {path} {batch} {scale:g}:")
                            print(_timeline(call, trace), flush=True)
    if args.python:
        _python_profile(fns, args.vocab)


if __name__ == "__main__":
    main()
