#!/usr/bin/env python3
"""The per-call dispatch of a routed feature (``impl()`` of ``by_batch``/``dtypes``) against a
direct call of the same function, side by side in one run.

Two measures: the overhead alone (the implementation a pass-through, so only the dispatch is
timed: nanoseconds per call and the ratio), and the ratio with the real torch sampler at batch
1 and 32 (vocab 4096, k 50 on CPU), which is what an engine sees. Interleaved repeats, minimum
of each.

Usage: python benchmarks/bench_dispatch.py [--number N] [--repeat N] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import timeit
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import machine


def passthrough(logits: Any, k: Any, p: Any) -> Any:
    """The cheapest implementation: what is left of a call is the dispatch."""
    return logits


POLICY = """
schema = "kernelpolicy.policy/v1"
[features."bench.sampler"]
description = "two implementations routed by batch"
fallback = "torch"
dtypes = ["float32", "bfloat16", "float16"]
[[features."bench.sampler".candidates]]
impl = "small"
entry = "{entry}"
[[features."bench.sampler".candidates]]
impl = "torch"
entry = "{entry}"
[[features."bench.sampler".by_batch]]
max = 511
prefer = ["small"]
[[features."bench.sampler".by_batch]]
min = 512
prefer = ["torch"]
"""


def routed(entry: str) -> Any:
    import kernelpolicy
    from kernelpolicy.engine import resolve_policies
    from kernelpolicy.policy import load_policy_text

    platform = kernelpolicy.load_platform(
        Path(__file__).resolve().parent.parent / "kernelpolicy/fixtures/platforms/cpu.json"
    )
    resolution = resolve_policies(platform, {}, load_policy_text(POLICY.format(entry=entry)))
    return resolution.impl("bench.sampler")


def pair(
    direct: Any, dispatched: Any, args: tuple[Any, ...], number: int, repeat: int
) -> dict[str, float]:
    names = {"direct": direct, "dispatched": dispatched, "args": args}
    t_direct = t_ours = float("inf")
    a = timeit.Timer("direct(*args)", globals=names)
    b = timeit.Timer("dispatched(*args)", globals=names)
    for _ in range(repeat):
        t_direct = min(t_direct, a.timeit(number))
        t_ours = min(t_ours, b.timeit(number))
    return {
        "direct_ns": t_direct / number * 1e9,
        "dispatched_ns": t_ours / number * 1e9,
        "ratio": t_ours / t_direct,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument(
        "--number", type=int, default=200_000, help="calls per repeat (pass-through)"
    )
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import torch

    from kernelpolicy.kernels.torch_impl import top_k_top_p

    results = {}
    sampler = routed("bench_dispatch:passthrough")
    logits = torch.randn(8, 16)
    assert sampler(logits, None, None) is logits
    results["overhead (pass-through)"] = pair(
        passthrough, sampler, (logits, None, None), args.number, args.repeat
    )
    sampler = routed("kernelpolicy.kernels.torch_impl:top_k_top_p")
    for rows in (1, 32):
        x = torch.randn(rows, 4096)
        k = torch.full((rows,), 50)
        results[f"torch sampler {rows} x 4096, k 50"] = pair(
            top_k_top_p, sampler, (x, k, None), max(args.number // 400, 50), args.repeat
        )
    if args.json:
        print(json.dumps({"machine": machine(), "results": results}, indent=2))
        return
    print(f"machine: {machine()}")
    for case, r in results.items():
        print(
            f"{case:<34} direct {r['direct_ns']:10.1f} ns   routed {r['dispatched_ns']:10.1f} ns"
            f"   ratio {r['ratio']:5.2f}"
        )


if __name__ == "__main__":
    main()
