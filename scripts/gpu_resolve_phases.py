"""Where the first ``resolve()`` of a CUDA worker spends its time, process by process: fresh
interpreters (torch imported and CUDA initialised first, as ``gpu_cold_start.py``'s ``worker``
stage), each timing the phases of ``kernelpolicy.api``'s resolve (its import, the settings, the
policies, gathering the inputs with the probe, the halts, the decisions, the log line), to find
what makes the slow ones slow.

    PYTHONPATH=/tmp/site:$PWD python3 scripts/gpu_resolve_phases.py --runs 10

The first process fills the node's caches in a fresh ``XDG_CACHE_HOME`` (its row is the cold
one); the others are a worker's usual start. Prints one JSON row per process, then the median
and the slowest of each phase over the warm processes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

PHASES = r"""
import json, time
t0 = time.perf_counter()
import torch
torch.zeros(1, device=DEVICE); torch.cuda.synchronize() if DEVICE == "cuda" else None
times = {}
start = time.perf_counter()
import kernelpolicy
from kernelpolicy.code_cache import code_cached
from kernelpolicy.gcpause import collector_paused

def timed(owner, name, key):
    inner = getattr(owner, name)
    def wrapper(*args, **kwargs):
        begun = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            times[key] = times.get(key, 0.0) + time.perf_counter() - begun
    setattr(owner, name, wrapper)

# As kernelpolicy.resolve() does: the lazy import of kernelpolicy.api and the call inside one
# collector pause and code cache (imported outside them, the pause's end runs a full collection)
with collector_paused(), code_cached():
    t = time.perf_counter()
    import kernelpolicy.api as api
    import kernelpolicy.inputs as inputs
    times["import"] = time.perf_counter() - t
    for name, key in (("settings_from", "settings"), ("load_policies_for", "policies"),
                      ("gather", "gather"), ("halts_for_node", "halts"),
                      ("log_resolution", "log"), ("runtime_log", "host"),
                      ("node_reporter", "host")):
        timed(api, name, key)
    timed(inputs.Inputs, "resolve", "decide")
    t = time.perf_counter()
    res = api.resolve()
    times["resolve"] = time.perf_counter() - t
times["total"] = time.perf_counter() - start  # the pause's end included
print(json.dumps({k: round(v * 1e3, 2) for k, v in times.items()}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--device", default="cuda", help="cpu: the same on a machine without one")
    args = parser.parse_args()
    code = PHASES.replace("DEVICE", repr(args.device))
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELPOLICY_")}
    env["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="kp-phases-")
    rows = []
    for run in range(args.runs):
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, timeout=120, check=False)  # fmt: skip
        lines = done.stdout.strip().splitlines()
        row = json.loads(lines[-1]) if lines else {"error": done.stderr[-800:]}
        print(json.dumps({"run": run, **row}), flush=True)
        if run and "error" not in row:
            rows.append(row)
    keys = sorted({k for row in rows for k in row}, key=lambda k: -max(r.get(k, 0) for r in rows))
    for key in keys:
        values = [row.get(key, 0.0) for row in rows]
        print(f"{key:10s} median {statistics.median(values):7.2f} ms  max {max(values):7.2f} ms")


if __name__ == "__main__":
    main()
