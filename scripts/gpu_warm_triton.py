#!/usr/bin/env python3
"""On a GPU: build the Triton sampler's kernels in parallel processes, running its conformance
checks per dtype while they build, so that later calls on this machine find every kernel in
Triton's on-disk cache (TRITON_CACHE_DIR) instead of compiling for minutes.

Jobs, one process each (Triton builds one kernel at a time per process): the robustness checks
of one path and dtype, one distribution case of one dtype, the tie and shape checks, and the
benchmark's shapes (every path, each vocabulary) of one dtype, each called three times: eager,
captured, then a replay of that CUDA graph with new logits, k and p (a forced token per row
checks that every call read its own). Prints one line per job: checks passed and failed (with
the failed names), seconds, and notes: a dtype read as float32 after a build failure
(``sampling_triton.UPCAST``), wide or proposal kernels that failed to build (``WIDE_FAILED``,
``REJECT_FAILED``), graphs captured and captures that failed. Exits 1 when a check failed.

python scripts/gpu_warm_triton.py [--dtypes float32,bfloat16,float16] [--bench-dtypes
float32,bfloat16] [--bench-vocabs 128256,151936] [--jobs 16]
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from collections.abc import Iterator
from typing import Any


def _job(spec: tuple[str, str, str]) -> tuple[str, int, list[str], float, str]:
    kind, dtype_name, arg = spec
    import torch

    from kernelpolicy.kernels import sampling_triton
    from kernelpolicy.verify import distribution, samplers

    dtype = getattr(torch, dtype_name)
    sample = sampling_triton.top_k_top_p
    start = time.perf_counter()
    outcomes = []
    if kind == "robustness":  # one path of one dtype
        samplers.DTYPES = (dtype,)  # type: ignore[assignment]
        samplers.PATHS = {arg: samplers.PATHS[arg]}
        outcomes = list(samplers.robustness(sample, "cuda"))
    elif kind == "distribution":  # one (k, p) case of one dtype, its mixed rows or its wide row
        row = (
            torch.randn(1, distribution.VOCAB, generator=torch.Generator().manual_seed(0)) * 2.0
        ).to(dtype)
        if arg == "wide":  # the suite's wide row (seed + 1 of distribution())
            wide = torch.randn(
                1, distribution.WIDE_VOCAB, generator=torch.Generator().manual_seed(1)
            )
            outcomes = [distribution.wide_nucleus(sample, wide.to(dtype), "cuda")]
        elif arg == "mixed":
            outcomes = [distribution._mixed(sample, row, "cuda")]
        else:
            case_k, case_p = distribution.CASES[int(arg)]
            name = f"distribution/{dtype_name}/k={case_k or '-'},p={case_p or '-'}"
            outcomes = [
                distribution._same_row(sample, name, row, k=case_k, p=case_p, device="cuda")
            ]
    elif kind == "ties-shapes":  # the tie and shape checks (float32 and bfloat16 by name)
        distribution.DTYPES = ()  # type: ignore[assignment]
        outcomes = list(distribution.distribution(sample, "cuda"))
    else:  # the benchmark's shapes: every path, each vocabulary, a small batch
        outcomes = list(_replays(sample, dtype, [int(v) for v in arg.split(",")]))
    failed = [o.check for o in outcomes if not o.passed]
    notes = [
        f"{what}: {table[dtype][:200]}"
        for what, table in (
            ("read as float32 after a build failure", sampling_triton.UPCAST),
            ("wide kernels failed to build", sampling_triton.WIDE_FAILED),
            ("proposal kernels failed to build", sampling_triton.REJECT_FAILED),
        )
        if dtype in table
    ]
    graphs = sampling_triton.GRAPHS
    notes += [f"{len(graphs)} CUDA graphs"] if kind == "bench" else []
    notes += [f"capture failed: {why[:200]}" for why in graphs._failed.items.values()]
    name = f"{kind}/{dtype_name}/{arg}"
    return name, len(outcomes) - len(failed), failed, time.perf_counter() - start, "; ".join(notes)


def _replays(sample: Any, dtype: Any, vocabs: list[int]) -> Iterator[Any]:
    """Every path at each vocabulary, three times with a different forced token per row: the
    first call runs eagerly, the second captures the shape's CUDA graph, the third replays it,
    which must read the new logits, k and p."""
    import torch

    from kernelpolicy.evidence.model import Outcome

    for vocab in vocabs:
        for k, p in ((50, None), (None, 0.9), (50, 0.9), (None, None)):
            for call, shift in enumerate((0, 7, 13)):
                want = (torch.arange(4, device="cuda") * 1000 + 5 + shift) % vocab
                logits = torch.randn(4, vocab, device="cuda").to(dtype)
                logits[torch.arange(4), want] = 1000.0  # all the mass on one token per row
                kt = None if k is None else torch.full((4,), k + shift)
                pt = None if p is None else torch.full((4,), p - shift / 100, device="cuda")
                got = sample(logits, kt, pt)
                name = f"replay/{vocab}/k={k},p={p}/call {call + 1}"
                ok = torch.equal(got.cpu(), want.cpu())
                yield Outcome(name, ok, "" if ok else f"{got.tolist()} != {want.tolist()}")


def _guarded(spec: tuple[str, str, str]) -> tuple[str, int, list[str], float, str]:
    """A job whose own code raised reports that as its failure instead of ending the pool."""
    start = time.perf_counter()
    try:
        return _job(spec)
    except Exception as exc:
        why = f"{'/'.join(spec)} raised {type(exc).__name__}: {str(exc)[:300]}"
        return "/".join(spec), 0, [why], time.perf_counter() - start, ""


def _specs(
    dtypes: list[str], bench_dtypes: list[str], bench_vocabs: str
) -> list[tuple[str, str, str]]:
    """The bench and the slow robustness jobs first: a pool starts jobs in order."""
    from kernelpolicy.verify import distribution, samplers

    specs = [("bench", d, bench_vocabs) for d in bench_dtypes]
    specs += [("robustness", d, path) for d in dtypes for path in samplers.PATHS]
    specs += [("ties-shapes", "float32", "")] if dtypes else []
    cases = [str(i) for i in range(len(distribution.CASES))] + ["mixed", "wide"]
    specs += [("distribution", d, case) for d in dtypes for case in cases]
    return specs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--dtypes", default="float32,bfloat16,float16")
    parser.add_argument("--bench-dtypes", default="float32,bfloat16")
    parser.add_argument("--bench-vocabs", default="128256,151936")
    parser.add_argument("--jobs", type=int, default=16)
    args = parser.parse_args()
    specs = _specs(
        [d for d in args.dtypes.split(",") if d],
        [d for d in args.bench_dtypes.split(",") if d],
        args.bench_vocabs,
    )
    start = time.perf_counter()
    bad = 0
    # one fresh process per job: the jobs narrow the conformance modules' tables in place
    pool = multiprocessing.get_context("spawn").Pool(min(args.jobs, len(specs)), maxtasksperchild=1)
    with pool:
        for name, passed, failed, seconds, upcast in pool.imap_unordered(_guarded, specs):
            bad += len(failed)
            note = f"; {upcast}" if upcast else ""
            print(
                f"{name}: {passed} passed, {len(failed)} failed {failed[:6]}"
                f" ({seconds:.0f} s){note}",
                flush=True,
            )
    print(f"warm: {time.perf_counter() - start:.0f} s in all", flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
