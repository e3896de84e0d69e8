"""``kernelpolicy env``: the variables and flags that make an engine run what explain shows."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kernelpolicy.cli.common import HelpFormatter, add_resolve_options
from kernelpolicy.cli.resolving import add_engine_options, check_engine, resolve_explained


def register(commands: Any) -> None:
    from kernelpolicy.bridge.formats import FORMATS

    parser = commands.add_parser(
        "env",
        help="print the settings that make vLLM or SGLang run the chosen kernels",
        description=(
            "Resolve the policies (as explain does) and print the environment variables, and "
            "the command-line flags, that make an unmodified engine choose the same kernels. "
            "Decisions the engine cannot express are warnings on stderr; a decision that is an "
            "error, or two that need different values, exit 1 with the reasons. A choice that "
            "resolve().select() makes per call by batch (a feature's by_batch rows, a "
            "condition on batch) happens only in-process: the output says so, since variables "
            "carry one choice."
        ),
        epilog=(
            "examples:\n"
            "  kernelpolicy env --engine vllm\n"
            '  s=$(kernelpolicy env --engine vllm --format shell) || exit; eval "$s"\n'
            "  kernelpolicy env --engine sglang --platform node.json --format k8s\n"
            "  kernelpolicy env --engine vllm --env VLLM_ROCM_USE_AITER=1 --format json"
        ),
        formatter_class=HelpFormatter,
    )
    add_engine_options(parser)
    add_resolve_options(parser)
    output = parser.add_mutually_exclusive_group()
    output.add_argument(
        "--format", choices=FORMATS, default="shell",
        help="shell (export lines, quoted), dotenv, json, k8s (a container's env: list, YAML), "
        "k8s-json",
    )  # fmt: skip
    output.add_argument(  # as every other command spells it
        "--json", dest="format", action="store_const", const="json",
        help="the same as --format json",
    )  # fmt: skip
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kernelpolicy.bridge import engine_settings
    from kernelpolicy.bridge.formats import render

    resolution, inputs = resolve_explained(args)
    check_engine(resolution, args.engine)
    settings = engine_settings(
        resolution, args.engine, inputs.env,
        engine_version=args.engine_version, model_kind=args.model_kind,
    )  # fmt: skip
    if inputs.snapshot:
        note_ignored_shell(resolution, inputs, settings)
    for warning in settings.warnings:
        print(f"kernelpolicy: warning: {warning}", file=sys.stderr)
    if not settings.ok:
        report_errors(resolution, settings.errors)
        return 1
    if args.format == "k8s-json":  # a container fragment: no room for a note in it
        for note in settings.per_call_notes():
            print(f"kernelpolicy: note: {note}", file=sys.stderr)
    sys.stdout.write(render(settings, args.format))
    return 0


def engine_prefixes(engine: str) -> tuple[str, ...]:
    """The prefixes of ``engine``'s own variables (``VLLM_``), which its settings read too."""
    return (engine.upper().replace("-", "_") + "_",)


def note_ignored_shell(resolution: Any, inputs: Any, settings: Any) -> None:
    """With --platform: each variable this shell sets that the answer would read (the policies'
    switches, a force or override, the engine's own variables), which the snapshot's
    environment replaced, said on stderr with how to use it."""
    from kernelpolicy.cli.provenance import left_out
    from kernelpolicy.engine.switches import read_variables
    from kernelpolicy.limits import shown

    read = {*read_variables(resolution.policies), *settings.env}
    shell = {k: v for k, v in inputs.shell.items() if inputs.ignored_shell_value(k) is not None}
    prefixes = engine_prefixes(settings.engine)
    for name, value, there in left_out(inputs.env, shell, read, prefixes):
        said = "unset" if there is None else f"{name}={shown(there, 40)}"
        print(
            f"kernelpolicy: note: your shell has {name}={shown(value, 40)}, ignored with "
            f"--platform ({said} in the snapshot, whose environment the answer uses); pass --env "
            "to use it",
            file=sys.stderr,
        )


def report_errors(resolution: Any, errors: tuple[str, ...]) -> None:
    """Each error as explain words it, with the decisions' hints; an error several features
    share (a bad value of a switch they all read) is said once, naming them."""
    features: dict[str, list[str]] = {}  # message -> the features it is the error of
    for error in errors:
        feature, sep, message = error.partition(": ")
        features.setdefault(message if sep else error, []).append(feature if sep else "")
    for message, names in features.items():
        named = [n for n in names if n]
        if len(named) > 1:
            line = f"{message}; for {len(named)} features: {', '.join(named)}"
        else:
            line = f"{named[0]}: {message}" if named else message
        print(f"kernelpolicy: error: {line}", file=sys.stderr)
        for hint in dict.fromkeys(h for n in named for h in _hints(resolution, n)):
            print(f"  hint: {hint}", file=sys.stderr)


def _hints(resolution: Any, feature: str) -> tuple[str, ...]:
    """The hints of ``feature``'s decision, where it is an error."""
    decision = resolution.decisions.get(feature)
    if decision is None or decision.error is None:
        return ()
    return tuple(decision.hints)
