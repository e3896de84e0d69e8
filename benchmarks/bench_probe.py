#!/usr/bin/env python3
"""Probe speed, side by side with its references, in one run.

Budgets (DESIGN.md, issue 2):
  * in-process ``probe()`` on a CPU machine under 20 ms;
  * ``kernelpolicy probe --json`` as a whole process well under ``python -c "import torch"``
    (expected ratio < 0.3).

The CLI is also timed without bytecode (``PYTHONPYCACHEPREFIX`` an empty directory and
``PYTHONDONTWRITEBYTECODE=1``: every module compiled from source in every process), as in an
image whose packages were installed with ``pip install --no-compile``; deploy/Dockerfile
compiles bytecode at build time for that reason.

Usage: python benchmarks/bench_probe.py [--runs N] [--calls N] [--json]
"""

from __future__ import annotations

import argparse
import json
import platform as host
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import clean_env, fresh

FIRST_CALL = (
    "import time; t = time.perf_counter(); import kernelpolicy; kernelpolicy.probe(); "
    "print(time.perf_counter() - t)"
)


def warm_calls(calls: int) -> float:
    import kernelpolicy

    kernelpolicy.probe()  # the one-time import cost is measured separately
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        kernelpolicy.probe()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def first_call(runs: int) -> float:
    return fresh(FIRST_CALL, runs)


def whole_process(runs: int) -> tuple[float, float, float]:
    """Median wall times of the CLI, of the CLI without bytecode, and of importing torch, runs
    interleaved."""
    cli = shutil.which("kernelpolicy")
    probe_cmd = (
        [cli, "probe", "--json"]
        if cli
        else [sys.executable, "-m", "kernelpolicy", "probe", "--json"]
    )
    torch_cmd = [sys.executable, "-c", "import torch"]
    with tempfile.TemporaryDirectory() as empty:
        # With a prefix Python reads bytecode only from it; it stays empty (nothing written).
        source_only = {**clean_env(), "PYTHONPYCACHEPREFIX": empty, "PYTHONDONTWRITEBYTECODE": "1"}
        commands = ((probe_cmd, clean_env()), (probe_cmd, source_only), (torch_cmd, clean_env()))
        samples: list[list[float]] = [[], [], []]
        for _ in range(runs):
            for (cmd, env), sink in zip(commands, samples, strict=True):
                start = time.perf_counter()
                subprocess.run(cmd, capture_output=True, check=True, env=env)
                sink.append(time.perf_counter() - start)
    probe_t, source_t, torch_t = (statistics.median(sink) for sink in samples)
    return probe_t, source_t, torch_t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--runs", type=int, default=7, help="process launches per command")
    parser.add_argument("--calls", type=int, default=200, help="warm in-process probe() calls")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()

    warm = warm_calls(args.calls)
    first = first_call(args.runs)
    cli, cli_from_source, torch = whole_process(args.runs)
    result = {
        "machine": f"{host.node()} {host.machine()} {host.processor() or ''}".strip(),
        "python": host.python_version(),
        "probe_warm_ms": round(warm * 1e3, 3),
        "probe_first_call_ms": round(first * 1e3, 1),
        "cli_probe_json_ms": round(cli * 1e3, 1),
        "cli_probe_json_no_bytecode_ms": round(cli_from_source * 1e3, 1),
        "import_torch_ms": round(torch * 1e3, 1),
        "ratio_cli_over_torch": round(cli / torch, 3),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    rows = [
        (f"in-process probe(), warm, median of {args.calls}", "probe_warm_ms", "budget 20 ms"),
        (f"import kernelpolicy + first probe(), median of {args.runs}", "probe_first_call_ms", ""),
        (f"'kernelpolicy probe --json' process, median of {args.runs}", "cli_probe_json_ms", ""),
        (
            f"the same, no bytecode (--no-compile), median of {args.runs}",
            "cli_probe_json_no_bytecode_ms",
            "",
        ),
        (f"'python -c \"import torch\"' process, median of {args.runs}", "import_torch_ms", ""),
    ]
    for label, key, note in rows:
        print(f"{label:<52} {result[key]:10.3f} ms  {note}")
    ratio = result["ratio_cli_over_torch"]
    print(f"{'ratio: probe CLI / import torch':<52} {ratio:10.3f}     budget < 0.3")


if __name__ == "__main__":
    main()
