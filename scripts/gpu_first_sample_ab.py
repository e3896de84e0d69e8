"""Two trees side by side: the first sample issued at once after ``impl()``, from a kernel cache
holding the call's variant (``gpu_cold_start.py``'s ``warm-one`` stage), fresh processes of
each tree interleaved on one warm machine.

Run from the newer tree with the wheels installed (docs/gpu.md, "From a cold node to the first
sample")::

    PYTHONPATH=/tmp/site:$PWD python3 scripts/gpu_first_sample_ab.py --old ../old-tree --runs 7

``--old`` is an unpacked copy of the other tree (``git archive REV kernelpolicy scripts
policies``). Prints each process's time from ``impl()`` to the first sample, then both lists.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.gpu_cold_start import FIRST_SAMPLE, WARM_ONE, child, warm_one_env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--old", type=Path, required=True, help="the other tree, unpacked")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--site", default="/tmp/site", help="where the GPU wheels are installed")
    args = parser.parse_args()
    trees = {"new": Path.cwd().resolve(), "old": args.old.resolve()}
    base = {k: v for k, v in os.environ.items() if k not in ("TRITON_CACHE_DIR", "PYTHONPATH")}
    env = warm_one_env(base, prefix="kp-ab-")
    start = time.perf_counter()
    built = child(WARM_ONE, {**env, "PYTHONPATH": f"{args.site}:{trees['new']}"})
    print(json.dumps({"build": built, "seconds": time.perf_counter() - start}), flush=True)
    after: dict[str, list[float]] = {name: [] for name in trees}
    order = list(trees.items())
    for run in range(args.runs):
        for name, tree in order if run % 2 == 0 else order[::-1]:
            os.chdir(tree)  # ``python -c`` puts the working directory first on the path
            row = child(FIRST_SAMPLE, {**env, "PYTHONPATH": f"{args.site}:{tree}"})
            after[name].append(round(float(row.get("after_impl_s", -1)), 3))  # type: ignore[arg-type]
            print(name, run, json.dumps(row, default=str)[:600], flush=True)
    print(json.dumps(after))


if __name__ == "__main__":
    main()
