#!/usr/bin/env python3
"""From a cold node to the first sample, measured the way a serving engine meets it (issue 27).

Usage (on the GPU machine, after scripts/gpu_visit.sh's install): python scripts/gpu_cold_start.py
    --out DIR [--runs 3] [--stage all|worker|cold|warm]

Every measure runs in fresh processes (--runs of each), with torch imported and CUDA initialised
before kernelpolicy, as in an inference worker:

* ``worker``: the first ``resolve()`` (probe included) with the node's hardware cache cold, then
  warm, and ``impl("sampler.top_k_top_p")``, against the 50 ms budget;
* ``cold``: empty Triton and FlashInfer caches: the first sampler call (which must be served by
  the fallback while the chosen kernel builds in the background), the calls served by a
  fallback while building, and the time until the calls switch to the built kernel;
* ``warm``: ``kernelpolicy warm`` into a fresh kernel cache (timed), then a fresh process given
  that cache: the first sample after ``impl()`` (target: within 0.5 s);
* ``warm-one``: as ``warm``, but the cache holds only the variant the measured call needs,
  built by ``Builds.warm`` in a process of its own as ``kernelpolicy warm``'s children build
  (a visit short of device time: the whole warm takes minutes).

A process measured with ``WAIT_S`` 0 ends with ``os._exit`` once it has printed: the builds
still running in its threads would otherwise hold its exit for up to 30 s.

Results: one JSON object per line in DIR/cold_start.jsonl, and a summary on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WORKER = r"""
import json, os, sys, time
t0 = time.perf_counter()
import torch
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
t_cuda = time.perf_counter()
import kernelpolicy
t_import = time.perf_counter()
res = kernelpolicy.resolve()  # the front door: imports kernelpolicy.api on first use
t_resolve = time.perf_counter()
sample = res.impl("sampler.top_k_top_p")
t_impl = time.perf_counter()
t = time.perf_counter(); kernelpolicy.probe(); probe_again_ms = (time.perf_counter() - t) * 1e3
print(json.dumps({"cuda_init_s": t_cuda - t0, "import_ms": (t_import - t_cuda) * 1e3,
                  "probe_uncached_ms": probe_again_ms,
                  "resolve_ms": (t_resolve - t_import) * 1e3,
                  "first_resolve_with_import_ms": (t_resolve - t_cuda) * 1e3,
                  "impl_ms": (t_impl - t_resolve) * 1e3,
                  "impl_chosen": res.decision("sampler.top_k_top_p").impl}))
"""

# The machine's speed at that moment (benchmarks/bench_resolve.py's reference): a fresh
# interpreter importing six standard modules, run just before each worker process.
REFERENCE = r"""
import json, time; t = time.perf_counter()
import dataclasses, json, pathlib, logging, pickle, hashlib
print(json.dumps({"reference_ms": (time.perf_counter() - t) * 1e3}))
"""

FIRST_SAMPLE = r"""
import json, os, sys, time
t0 = time.perf_counter()
import torch
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
import kernelpolicy
from kernelpolicy.kernels import builds
res = kernelpolicy.resolve()
if os.environ.get("SWITCH_S"):  # the interpreter's switch interval, as a worker could set it
    sys.setswitchinterval(float(os.environ["SWITCH_S"]))
t_impl0 = time.perf_counter()
sample = res.impl("sampler.top_k_top_p")
time.sleep(float(os.environ.get("LOAD_GAP_S", "0")))  # a worker loading its model after impl()
logits = torch.randn(32, 128256, device="cuda") * 5
k = torch.full((32,), 50); p = torch.full((32,), 0.9, device="cuda")
t_impl = time.perf_counter()
ids = sample(logits, k, p); torch.cuda.synchronize()
t_first = time.perf_counter()
first = {"since_start_s": t_first - t0, "after_impl_s": t_first - t_impl0,
         "first_call_ms": (t_first - t_impl) * 1e3,
         "compiling_calls": dict(getattr(res, "compiling_calls", {})),
         "first_builds": {k: str(v) for k, v in builds.stats().items()}}
switch = None
calls = 1
deadline = time.perf_counter() + float(os.environ.get("WAIT_S", "0"))
while time.perf_counter() < deadline:
    before = dict(getattr(res, "compiling_calls", {}))
    sample(logits, k, p); torch.cuda.synchronize(); calls += 1
    after = dict(getattr(res, "compiling_calls", {}))
    if after == before and calls > 2:
        switch = time.perf_counter() - t_impl
        break
    time.sleep(0.05)
timed = []
for _ in range(5):
    torch.cuda.synchronize(); t = time.perf_counter()
    sample(logits, k, p); torch.cuda.synchronize()
    timed.append((time.perf_counter() - t) * 1e3)
print(json.dumps(default=str, obj={**first, "calls_until_switch": calls if switch else None,
                  "switch_after_s": switch, "later_call_ms": min(timed),
                  "builds": builds.stats() if hasattr(builds, "stats") else None,
                  "compiling_calls_end": dict(getattr(res, "compiling_calls", {})),
                  "runtime_fallbacks": [str(x)[:200] for x in res.runtime_fallbacks][:6]}))
if not switch:  # nothing more to measure: the builds in flight would hold the exit
    sys.stdout.flush(); sys.stderr.flush(); os._exit(0)
"""

# A collector callback for the profiles: the time of each collection while it is registered.
GC_TIMER = r"""
collections = []  # (generation, seconds) of each collection while ``timed`` is a callback
def timed(phase, info, started=[0.0]):
    if phase == "start":
        started[0] = time.perf_counter()
    else:
        collections.append((info["generation"], time.perf_counter() - started[0]))
"""

PROFILE_RESOLVE = (
    r"""
import cProfile, gc, io, json, os, pstats, sys, time
import torch
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
import kernelpolicy
"""
    + GC_TIMER
    + r"""
gc.callbacks.append(timed)
profile = cProfile.Profile()
t = time.perf_counter()
profile.enable()
res = kernelpolicy.resolve()
profile.disable()
seconds = time.perf_counter() - t
out = io.StringIO()
pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(40)
pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(15)
print(json.dumps({"resolve_ms": seconds * 1e3, "gc_ms": sum(s for _, s in collections) * 1e3,
                  "profile": out.getvalue()[-12000:]}))
"""
)

PROFILE = (
    r"""
import cProfile, io, json, os, pstats, sys, time
import torch
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
import kernelpolicy
res = kernelpolicy.resolve()
logits = torch.randn(32, 128256, device="cuda") * 5
k = torch.full((32,), 50); p = torch.full((32,), 0.9, device="cuda")
torch.cuda.synchronize()
steps = {}
t = time.perf_counter()
if os.environ.get("PRE_IMPORT"):  # the sampler's module imported before impl(), as a worker could
    import kernelpolicy.kernels.sampling_triton
    steps["pre_import_ms"] = (time.perf_counter() - t) * 1e3
t_impl0 = time.perf_counter()
sample = res.impl("sampler.top_k_top_p")
time.sleep(float(os.environ.get("LOAD_GAP_S", "0")))  # a worker loading its model after impl()
t_call = time.perf_counter()
import gc
"""
    + GC_TIMER
    + r"""
gc.callbacks.append(timed)
profile = cProfile.Profile()
profile.enable()
ids = sample(logits, k, p); torch.cuda.synchronize()
profile.disable()
steps["after_impl_s"] = time.perf_counter() - t_impl0
steps["first_call_s"] = time.perf_counter() - t_call
gc.callbacks.remove(timed)
steps["gc_full_ms"] = sum(s for g, s in collections if g == 2) * 1e3
steps["gc_all_ms"] = sum(s for g, s in collections) * 1e3
steps["gc_objects"] = len(gc.get_objects())
out = io.StringIO()
pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(45)
from kernelpolicy.kernels import builds
print(json.dumps({**steps, "builds": {n: str(v) for n, v in builds.stats().items()},
                  "profile": out.getvalue()[-9000:]}))
sys.stdout.flush(); os._exit(0)
"""
)

WARM_ONE = r"""
import json, sys, time
import torch
from kernelpolicy.kernels import sampling_triton
from kernelpolicy.kernels.cache_lookup import kernel_cache
from kernelpolicy.kernels.sampling_triton.variants import prepare
logits = torch.zeros(32, 128256, device="cuda")
k, p = torch.full((32,), 50), torch.full((32,), 0.9)
call = prepare(sampling_triton.DEFAULT.tuning, logits, k, p, None)
t = time.perf_counter()
failed = sampling_triton.warm([call.variant])
seconds = time.perf_counter() - t
record = kernel_cache()
print(json.dumps({"variant": call.variant.describe(), "build_s": seconds,
                  "failed": {str(k): v for k, v in failed.items()},
                  "record": None if record is None else str(record.root)}))
"""


def child(code: str, env: dict[str, str], timeout: int = 560) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip
    line = done.stdout.strip().splitlines()[-1:] or [""]
    try:
        return json.loads(line[0])  # type: ignore[no-any-return]
    except json.JSONDecodeError:
        return {"error": (done.stderr or done.stdout)[-1500:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--stage", default="all", choices=["all", "worker", "cold", "warm", "warm-one"]
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / "cold_start.jsonl"
    base = {k: v for k, v in os.environ.items() if k not in ("TRITON_CACHE_DIR",)}

    def record(stage: str, run: int, data: dict[str, object]) -> None:
        row = {"stage": stage, "run": run, **data}
        with results.open("a") as out:
            out.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)

    if args.stage in ("all", "worker"):
        worker(args.runs, base, record)
    if args.stage in ("all", "cold"):
        for run in range(args.runs):
            fresh = tempfile.mkdtemp(prefix="kp-cold-")
            env = {**base, "KERNELPOLICY_CACHE_DIR": fresh, "TRITON_CACHE_DIR": f"{fresh}/triton",
                   "FLASHINFER_WORKSPACE_BASE": f"{fresh}/fi", "XDG_CACHE_HOME": f"{fresh}/xdg",
                   "WAIT_S": os.environ.get("COLD_WAIT_S", "150")}  # fmt: skip
            record("cold", run, child(FIRST_SAMPLE, env))
    if args.stage in ("all", "warm"):
        cache = os.environ.get("KP_WARM_CACHE") or tempfile.mkdtemp(prefix="kp-warm-")
        env = {**base, "KERNELPOLICY_CACHE_DIR": cache}
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "kernelpolicy", "warm", "--vocab", "128256", "--jobs", "16",
             "--json"], env=env, capture_output=True, text=True, timeout=560, check=False,
        )  # fmt: skip
        seconds = time.perf_counter() - start
        report = {"seconds": seconds, "rc": done.returncode, "report": done.stdout[-2000:]}
        record("warm-build", 0, {**report, "stderr": done.stderr[-1500:]})
        kernels = Path(cache) / "kernels"
        for run in range(args.runs):
            warm_env = {**env, "TRITON_CACHE_DIR": str(kernels / "triton"), "WAIT_S": "0"}
            warm_env["FLASHINFER_WORKSPACE_BASE"] = str(kernels / "flashinfer")
            record("warm", run, child(FIRST_SAMPLE, warm_env))
    if args.stage == "warm-one":
        warm_one(args.runs, base, record)


def worker(runs: int, base: dict[str, str], record: Any) -> None:
    """The ``worker`` stage, in two environments: no ``KERNELPOLICY_*`` variable (the node's
    cache found through ``XDG_CACHE_HOME``: the settings model is not imported) and the cache
    named by ``KERNELPOLICY_CACHE_DIR`` (the settings model, pydantic-settings). Each has its
    own cache directory: run 0 finds it empty (hardware and pack caches cold), later runs warm."""
    plain = {k: v for k, v in base.items() if not k.startswith("KERNELPOLICY_")}
    for settings in ("none", "KERNELPOLICY_CACHE_DIR"):
        cache = tempfile.mkdtemp(prefix="kp-hw-")
        env = {**plain, "XDG_CACHE_HOME": cache}
        if settings != "none":
            env = {**plain, settings: cache}
        for run in range(runs):
            reference = child(REFERENCE, env)
            record("worker", run, {"settings": settings, **reference, **child(WORKER, env)})
        if os.environ.get("PROFILE_RESOLVE"):
            record("profile-resolve", 0, {"settings": settings, **child(PROFILE_RESOLVE, env)})


def warm_one_env(base: dict[str, str], prefix: str = "kp-warm-one-") -> dict[str, str]:
    """``base`` with a fresh kernel cache (empty until ``WARM_ONE`` builds into it) that
    kernelpolicy, Triton and FlashInfer use."""
    from kernelpolicy.kernel_cache import prepare_kernel_cache

    cache = tempfile.mkdtemp(prefix=prefix)
    kernels = prepare_kernel_cache(Path(cache))
    return {**base, "KERNELPOLICY_CACHE_DIR": cache, "TRITON_CACHE_DIR": str(kernels / "triton"),
            "FLASHINFER_WORKSPACE_BASE": str(kernels / "flashinfer"), "WAIT_S": "0"}  # fmt: skip


def warm_one(runs: int, base: dict[str, str], record: Any) -> None:
    """The ``warm-one`` stage: a fresh kernel cache holding the measured call's variant only."""
    env = warm_one_env(base)
    start = time.perf_counter()
    built = child(WARM_ONE, env)
    record("warm-one-build", 0, {**built, "seconds": time.perf_counter() - start})
    # SWITCH_INTERVALS: switch intervals (seconds, "" for the default) the runs interleave
    for run in range(runs):
        for switch in os.environ.get("SWITCH_INTERVALS", "").split(","):
            extra = {"SWITCH_S": switch} if switch else {}
            record("warm-one", run, {"switch_s": switch, **child(FIRST_SAMPLE, {**env, **extra})})
    if os.environ.get("PROFILE_FIRST_CALL"):
        record("profile", 0, child(PROFILE, env))
        record("profile-pre-import", 0, child(PROFILE, {**env, "PRE_IMPORT": "1"}))
        record("profile-gap", 0, child(PROFILE, {**env, "LOAD_GAP_S": "2"}))


if __name__ == "__main__":
    main()
