#!/usr/bin/env python3
"""Cold start against its budgets: ``import kernelpolicy; resolve()`` in a fresh interpreter
within 50 ms, and ``kernelpolicy explain`` as a whole process within 300 ms (DESIGN.md).

Each cold measure runs in a fresh interpreter after one warm-up run (which writes the bytecode
and the compiled-pack cache, as a node's first worker does), side by side with the same measure
with the pack cache off (``KERNELPOLICY_PACK_CACHE=0``: every process validates the pack, the
reference), and prints the ratio to the budget. The caches live in a temporary directory.

Usage: python benchmarks/bench_resolve.py [--runs N] [--calls N] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import clean_env, fresh, machine

COLD = (
    "import time; t = time.perf_counter(); import kernelpolicy; kernelpolicy.resolve(); "
    "print(time.perf_counter() - t)"
)
# A worker imports torch first. The first full garbage collection after that import walks all
# of torch's objects (100-180 ms on this machine) and lands in whatever allocates next; it is
# run before the timer so that it is not counted as kernelpolicy's (it is torch's, paid once).
COLD_AFTER_TORCH = "import torch, gc; gc.collect(); " + COLD
EXPLAIN = [sys.executable, "-m", "kernelpolicy", "explain"]
# How fast this machine is right now, independent of kernelpolicy: the same interpreter
# importing a fixed set of standard modules (on shared virtual machines it moves by 1.5x over a
# day; compare runs through it).
STDLIB = (
    "import time; t = time.perf_counter(); "
    "import dataclasses, json, pathlib, logging, pickle, hashlib; print(time.perf_counter() - t)"
)


def warm(calls: int) -> float:
    import kernelpolicy

    env = {"KERNELPOLICY_LOG_FORMAT": "off"}
    kernelpolicy.resolve(env=env)
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        kernelpolicy.resolve(env=env)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def process(argv: list[str], runs: int, env: dict[str, str]) -> float:
    """Median wall time of ``argv`` as a whole process (after one warm-up run)."""
    subprocess.run(argv, env=env, check=True, capture_output=True)
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, env=env, check=True, capture_output=True)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def measure(runs: int, calls: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as cache:
        os.environ["XDG_CACHE_HOME"] = cache  # fresh() children inherit it
        env = {**clean_env(), "XDG_CACHE_HOME": cache}
        off = {**env, "KERNELPOLICY_PACK_CACHE": "0"}
        result: dict[str, float] = {}
        result["stdlib_reference_ms"] = fresh(STDLIB, runs) * 1e3
        result["resolve_warm_ms"] = warm(calls) * 1e3
        result["resolve_cold_ms"] = fresh(COLD, runs) * 1e3
        os.environ["KERNELPOLICY_PACK_CACHE"] = "0"
        result["resolve_cold_no_pack_cache_ms"] = fresh(COLD, runs) * 1e3
        del os.environ["KERNELPOLICY_PACK_CACHE"]
        if importlib.util.find_spec("torch") is not None:
            result["resolve_cold_after_torch_ms"] = fresh(COLD_AFTER_TORCH, runs) * 1e3
        result["explain_process_ms"] = process(EXPLAIN, runs, env) * 1e3
        result["explain_process_no_pack_cache_ms"] = process(EXPLAIN, runs, off) * 1e3
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--runs", type=int, default=9, help="fresh processes per measure")
    parser.add_argument("--calls", type=int, default=100, help="warm in-process calls")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.runs, args.calls)
    if args.json:
        print(json.dumps({"machine": machine(), **result}, indent=2))
        return
    print(f"machine: {machine()}")
    print(
        f"machine speed reference (fresh interpreter importing six standard modules): "
        f"{result['stdlib_reference_ms']:.1f} ms"
    )
    rows = [
        (f"resolve() in-process, median of {args.calls}", "resolve_warm_ms", 50.0),
        ("import + first resolve(), fresh interpreter", "resolve_cold_ms", 50.0),
        ("  the same, pack cache off (reference)", "resolve_cold_no_pack_cache_ms", 50.0),
        ("  the same, torch imported first (not timed)", "resolve_cold_after_torch_ms", 50.0),
        ("kernelpolicy explain, whole process", "explain_process_ms", 300.0),
        ("  the same, pack cache off (reference)", "explain_process_no_pack_cache_ms", 300.0),
    ]  # fmt: skip
    for label, key, budget in rows:
        if key not in result:
            continue
        value = result[key]
        print(f"{label:<52} {value:8.1f} ms  {value / budget:5.2f}x of the {budget:g} ms budget")
    cold = result["resolve_cold_no_pack_cache_ms"] / result["resolve_cold_ms"]
    explain = result["explain_process_no_pack_cache_ms"] / result["explain_process_ms"]
    print(f"pack cache speed-up: import + resolve {cold:.2f}x, explain {explain:.2f}x")


if __name__ == "__main__":
    main()
