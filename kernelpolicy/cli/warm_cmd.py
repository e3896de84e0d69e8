"""``kernelpolicy warm``: build every kernel variant this node's decisions can route to, in
parallel processes, into the node's kernel cache (:mod:`kernelpolicy.kernel_cache`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kernelpolicy.cli.common import HelpFormatter, add_resolve_options, counted, local_settings
from kernelpolicy.cli.resolving import resolve_args
from kernelpolicy.limits import MAX_VOCAB_SIZE, MAX_WARM_VOCABS, shown
from kernelpolicy.warming import DEFAULT_DEVICE, DEFAULT_JOBS, DEFAULT_VOCABS


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
    add_build_options(parser)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.set_defaults(run=run)


def add_build_options(parser: argparse.ArgumentParser, *, prefix: str = "") -> None:
    """What to build and how: ``--vocab``, ``--jobs``, ``--device`` for ``kernelpolicy warm``;
    the same options, in the same words, as ``serve --warm-vocab`` and the others with
    ``prefix="warm-"`` (each said to go with ``--warm``)."""
    said = "with --warm: " if prefix else ""
    parser.add_argument(
        f"--{prefix}vocab", type=vocab_sizes, action="extend", metavar="N[,N...]",
        help=f"{said}vocabulary sizes of the models served (repeatable, or comma-separated; "
        f"default {','.join(map(str, DEFAULT_VOCABS))})",
    )  # fmt: skip
    parser.add_argument(
        f"--{prefix}jobs", type=int, default=DEFAULT_JOBS, metavar="N",
        help=f"{said}build processes at once (default: the CPUs, at most 8)",
    )  # fmt: skip
    parser.add_argument(
        f"--{prefix}device", default=DEFAULT_DEVICE, metavar="DEVICE",
        help=f"{said}the device to build for (default {DEFAULT_DEVICE}: the first GPU this "
        "process sees)",
    )  # fmt: skip


def vocab_sizes(text: str) -> list[int]:
    """``--vocab``'s value: one vocabulary size, or several separated by commas (as the help
    shows the default), each from 1 to ``MAX_VOCAB_SIZE``, at most ``MAX_WARM_VOCABS``."""
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1 or max(sizes) > MAX_VOCAB_SIZE or len(sizes) > MAX_WARM_VOCABS:
        raise argparse.ArgumentTypeError(
            f"{shown(text, 64)!r}: expected up to {MAX_WARM_VOCABS} vocabulary sizes from 1 to "
            f"{MAX_VOCAB_SIZE}, such as 128256 or 32000,128256"
        )
    return sizes


def run(args: argparse.Namespace) -> int:
    from kernelpolicy.kernel_cache import kernel_cache_dir, prepare_kernel_cache
    from kernelpolicy.settings import default_cache_dir
    from kernelpolicy.warming import label, node_warming, tasks_for

    if args.jobs < 1:
        from kernelpolicy.errors import SettingsError

        raise SettingsError(f"--jobs {args.jobs}: expected 1 or more")
    resolution, _ = resolve_args(args)
    # the cache is this machine's, even with --platform (as policy files and evidence are)
    cache = local_settings(args).cache_dir or default_cache_dir()
    root = kernel_cache_dir(cache)
    vocabs = args.vocab or list(DEFAULT_VOCABS)
    warming = node_warming(resolution, root, vocabs=vocabs, device=args.device, jobs=args.jobs)
    if isinstance(warming, str):  # no device: nothing built, the tasks there would be said
        # and no cache made (as serve --warm): a user who cannot make one has nothing to build
        return _report(args, str(root), tasks_for(resolution, vocabs), [], warming)
    prepare_kernel_cache(cache)  # the builds' environment names root, made private here

    def told(result: dict[str, Any]) -> None:
        status = f"failed: {result['failed']}" if result["failed"] else "built"
        print(f"kernelpolicy warm: {label(result)}: {status} in {result['seconds']} s",
              file=sys.stderr)  # fmt: skip

    warming.told = told
    return _report(args, str(root), warming.tasks, warming.run(), None)


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
