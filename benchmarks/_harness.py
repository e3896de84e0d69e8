"""Shared helpers for the benchmark scripts: fresh-interpreter timing and machine description."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys


def clean_env() -> dict[str, str]:
    """The environment for child interpreters: bytecode caching on, as in an installed package
    (some shells export PYTHONDONTWRITEBYTECODE, which would time the compiler instead)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["KERNELPOLICY_LOG_FORMAT"] = "off"
    return env


def fresh(code: str, runs: int) -> float:
    """Median of ``runs`` fresh interpreters, each printing its own elapsed seconds."""
    env = clean_env()
    subprocess.run(
        [sys.executable, "-c", code], env=env, check=True, capture_output=True
    )  # writes .pyc
    samples = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
        )
        samples.append(float(out.stdout.split()[-1]))
    return statistics.median(samples)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(
                (line.split(":", 1)[1].strip() for line in info if line.startswith("model name")),
                cpu,
            )
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {cpu}, Python {platform.python_version()}"
