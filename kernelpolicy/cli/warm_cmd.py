"""``kernelpolicy warm``: build every kernel variant this node's decisions can route to, in
parallel processes, into the node's kernel cache (:mod:`kernelpolicy.kernel_cache`)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kernelpolicy.cli.common import HelpFormatter, add_resolve_options, counted, local_settings
from kernelpolicy.cli.resolving import resolve_args

DEFAULT_VOCABS = (32000, 128256, 151936)  # Llama 2, Llama 3, Qwen: the vocabulary classes
# feature -> its implementations whose first call compiles (the ones warm can build)
BUILDERS: dict[str, tuple[str, ...]] = {"sampler.top_k_top_p": ("triton", "flashinfer")}
TASK_SECONDS = 900  # one build process (a Triton variant compiles in 40-50 s on an H100 node)


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "warm",
        help="build the kernels this node's decisions can route to, into the kernel cache",
        description=(
            "Resolve the policies on this node and build, in parallel processes, every variant "
            "of the compiled kernels (kernelpolicy's Triton sampler, FlashInfer's JIT) that the "
            "decisions can route to: each dtype of the feature and each vocabulary class given. "
            "They go to <cache dir>/kernels (TRITON_CACHE_DIR, FLASHINFER_WORKSPACE_BASE), "
            "which kernelpolicy exec gives the engines it starts when the cache is trusted. "
            "Without a CUDA device there is nothing to build (exit 0). Exit 1 when a build fails."
        ),
        epilog="examples:\n  kernelpolicy warm\n  kernelpolicy warm --vocab 128256 --jobs 16",
        formatter_class=HelpFormatter,
    )
    add_resolve_options(parser)
    parser.add_argument(
        "--vocab", type=int, action="append", metavar="N",
        help=f"vocabulary sizes of the models served (repeatable; default {DEFAULT_VOCABS})",
    )  # fmt: skip
    parser.add_argument(
        "--jobs", type=int, default=min(8, os.cpu_count() or 1), metavar="N",
        help="build processes at once (default: the CPUs, at most 8)",
    )  # fmt: skip
    parser.add_argument("--device", default="cuda:0", help="the device to build for")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.set_defaults(run=run)


def tasks_for(resolution: Any, vocabs: list[int]) -> list[dict[str, Any]]:
    """One build task per (implementation, dtype[, vocabulary]) the decisions can route to."""
    tasks = []
    for name, decision in resolution.decisions.items():
        spec = resolution.policies.features[name].spec
        dtypes = list(spec.dtypes) or ["float32"]
        builders = BUILDERS.get(name, ())
        for impl in dict.fromkeys(i for i in decision.order if i in builders):
            for dtype in dtypes:
                for vocab in vocabs if impl == "triton" else [None]:
                    tasks.append({"feature": name, "impl": impl, "dtype": dtype, "vocab": vocab})
    return tasks


def run(args: argparse.Namespace) -> int:
    from kernelpolicy.kernel_cache import VARIABLES, prepare_kernel_cache
    from kernelpolicy.settings import default_cache_dir

    if args.jobs < 1:
        from kernelpolicy.errors import SettingsError

        raise SettingsError(f"--jobs {args.jobs}: expected 1 or more")
    resolution, _ = resolve_args(args)
    # the cache is this machine's, even with --platform (as policy files and evidence are)
    cache = local_settings(args).cache_dir or default_cache_dir()
    root = prepare_kernel_cache(cache)
    tasks = tasks_for(resolution, args.vocab or list(DEFAULT_VOCABS))
    child_env = {**os.environ, **{k: str(root / sub) for k, sub in VARIABLES.items()}}
    if not _has_device(args.device):
        results: list[dict[str, Any]] = []
        note = f"no device {args.device} here: nothing to build"
    else:
        note = None
        with ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(lambda t: _build(t, args.device, child_env), tasks))
    return _report(args, str(root), tasks, results, note)


def _has_device(device: str) -> bool:
    try:
        import torch
    except ImportError:
        return False
    return device.startswith("cuda") and torch.cuda.is_available()


def _build(task: dict[str, Any], device: str, env: dict[str, str]) -> dict[str, Any]:
    start = time.monotonic()
    payload = json.dumps({**task, "device": device})
    try:
        done = subprocess.run(
            [sys.executable, "-m", "kernelpolicy.cli.warm_child", payload], env=env,
            capture_output=True, text=True, timeout=TASK_SECONDS, check=False,
        )  # fmt: skip
        failed = (done.stdout.strip() or done.stderr.strip()[-300:]) if done.returncode else ""
    except subprocess.TimeoutExpired:
        failed = f"over {TASK_SECONDS} s"
    result = {**task, "seconds": round(time.monotonic() - start, 1), "failed": failed or None}
    label = f"{task['impl']} {task['dtype']}" + (f" vocab {task['vocab']}" if task["vocab"] else "")
    status = f"failed: {failed}" if failed else "built"
    print(f"kernelpolicy warm: {label}: {status} in {result['seconds']} s", file=sys.stderr)
    return result


def _report(
    args: argparse.Namespace, root: str, tasks: list[Any], results: list[Any], note: str | None
) -> int:
    failed = [r for r in results if r["failed"]]
    if args.json:
        print(json.dumps({"cache": root, "tasks": len(tasks), "note": note, "results": results}))
    else:
        print(f"kernel cache: {root}")
        print(
            note or f"built {len(results) - len(failed)} of {counted(len(tasks), 'variant group')}"
        )
        for r in failed:
            print(f"  failed: {r['impl']} {r['dtype']} {r['vocab'] or ''}: {r['failed']}")
    return 1 if failed else 0
