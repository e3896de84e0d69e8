"""The ``kernelpolicy`` command line: one sub-command per question an operator asks.

This module imports nothing heavy at the top: :func:`main` imports the commands inside its
Ctrl-C boundary, so an interrupt during start-up is one line and exit 130, never a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kernelpolicy.cli.interrupts import Interrupts

if TYPE_CHECKING:
    from kernelpolicy.cli.parsing import SuggestingParser

_EPILOG = """\
examples:
  kernelpolicy probe                      what this machine is, as a table
  kernelpolicy probe --json > node.json   the same as a platform snapshot
  kernelpolicy probe --platform node.json show a snapshot taken elsewhere
  kernelpolicy explain                    each feature's kernel here, and why
  kernelpolicy explain --platform node.json --env VLLM_ROCM_USE_AITER=1
  kernelpolicy check my-policies/         validate policies, mistakes located
  kernelpolicy matrix                     decisions on every shipped fixture
  kernelpolicy env --engine vllm          vLLM's variables and flags for them
  kernelpolicy exec --engine vllm -- vllm serve MODEL  start vLLM with them
  kernelpolicy verify                     check kernels here, kept as evidence
  kernelpolicy warm                       build the GPU kernels ahead of use
  kernelpolicy serve                      the daemon (gRPC, flagd-compatible)
  kernelpolicy status                     a daemon's revision, reload errors
  kernelpolicy labels                     labels for Node Feature Discovery
  kernelpolicy diff --against NEW/        a policy change's effect on a fleet
  kernelpolicy completion bash            shell completion (bash or zsh)
"""


def build_parser() -> SuggestingParser:
    """The whole command line, every sub-command registered."""
    from kernelpolicy import __version__
    from kernelpolicy.cli import (
        check_cmd,
        completion_cmd,
        diff_cmd,
        env_cmd,
        exec_cmd,
        explain_cmd,
        labels_cmd,
        matrix_cmd,
        probe_cmd,
        serve_cmd,
        verify_cmd,
        warm_cmd,
    )
    from kernelpolicy.cli.common import HelpFormatter, disable_abbreviations
    from kernelpolicy.cli.parsing import SuggestingParser

    parser = SuggestingParser(
        prog="kernelpolicy",
        description="Which GPU kernel runs on this machine, and why.",
        epilog=_EPILOG,
        formatter_class=HelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"kernelpolicy {__version__}")
    commands = parser.add_subparsers(dest="subcommand", metavar="COMMAND")
    probe_cmd.register(commands)
    explain_cmd.register(commands)
    check_cmd.register(commands)
    matrix_cmd.register(commands)
    env_cmd.register(commands)
    exec_cmd.register(commands)
    verify_cmd.register(commands)
    serve_cmd.register(commands)
    labels_cmd.register(commands)
    diff_cmd.register(commands)
    completion_cmd.register(commands, parser)
    warm_cmd.register(commands)
    disable_abbreviations(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 a finding such as an error, 2 bad usage or
    input, 130 interrupted; ``exec`` 126/127 when its command cannot run or is not found,
    else the engine's own status; see docs/cli.md).

    Called as the process's entry point (``argv`` None), it first takes SIGINT back from a
    parent that ignored it (``cmd &`` in a script), except for ``exec``, whose engine inherits
    the parent's choice; the first interrupt makes any further one ignored while it exits.
    """
    process = argv is None
    if process:
        _INTERRUPTS.install(restore=sys.argv[1:2] != ["exec"])
    try:
        from kernelpolicy.cli.common import run_guarded
        from kernelpolicy.code_cache import code_cached

        with code_cached():  # the commands' modules make most of the package's classes
            parser = build_parser()
            args = parser.parse_args(argv)
    except KeyboardInterrupt:
        return interrupted(process)
    except Exception as exc:
        from kernelpolicy.cli.common import caused_by_interrupt

        if caused_by_interrupt(exc):
            return interrupted(process)
        raise
    if args.subcommand is None:
        parser.missing_command()
        return 2
    from kernelpolicy.logs import warnings_on_stderr

    with warnings_on_stderr():  # what the library says to a host's logging reaches the user
        return run_guarded(args)


def interrupted(process: bool) -> int:
    """Ctrl-C during start-up: one line, exit 130 (128 + SIGINT, as a shell reports it)."""
    if process:
        _INTERRUPTS.stop_listening()
    print("kernelpolicy: error: interrupted", file=sys.stderr, flush=True)
    return 130


_INTERRUPTS = Interrupts()
"""The process's SIGINT handling (installed by :func:`main` when it is the entry point)."""
