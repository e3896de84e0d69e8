#!/usr/bin/env python3
"""``import kernelpolicy; resolve()`` on this machine, against the 50 ms budget (DESIGN.md).

Reports the in-process call (probe + policy check + engine, policies already loaded), the first
call in a fresh interpreter (imports and policy compilation included), and the same first call
where pydantic is already imported, as it is in every vLLM or SGLang worker.

Usage: python benchmarks/bench_resolve.py [--runs N] [--calls N] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import fresh, machine

COLD = (
    "import time; t = time.perf_counter(); import kernelpolicy; kernelpolicy.resolve(); "
    "print(time.perf_counter() - t)"
)
COLD_PYDANTIC = "import pydantic, pydantic_settings; " + COLD
IMPORT_PYDANTIC = (
    "import time; t = time.perf_counter(); import pydantic, pydantic_settings; "
    "print(time.perf_counter() - t)"
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--runs", type=int, default=7, help="fresh interpreters per measure")
    parser.add_argument("--calls", type=int, default=100, help="warm in-process calls")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = {
        "machine": machine(),
        "resolve_warm_ms": warm(args.calls) * 1e3,
        "resolve_cold_ms": fresh(COLD, args.runs) * 1e3,
        "resolve_cold_pydantic_loaded_ms": fresh(COLD_PYDANTIC, args.runs) * 1e3,
        "import_pydantic_ms": fresh(IMPORT_PYDANTIC, args.runs) * 1e3,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"machine: {result['machine']}")
    rows = [
        (f"resolve() in-process, median of {args.calls}", "resolve_warm_ms"),
        (f"import + first resolve(), fresh interpreter, median of {args.runs}", "resolve_cold_ms"),
        ("  with pydantic already imported (vLLM/SGLang)", "resolve_cold_pydantic_loaded_ms"),
        ("  of which importing pydantic + pydantic-settings", "import_pydantic_ms"),
    ]  # fmt: skip
    for label, key in rows:
        ratio = result[key] / 50.0
        print(f"{label:<68} {result[key]:8.1f} ms  {ratio:5.2f}x of the 50 ms budget")


if __name__ == "__main__":
    main()
