"""The ``kernelpolicy`` command line: one sub-command per question an operator asks."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from kernelpolicy import __version__
from kernelpolicy.cli import (
    check_cmd,
    diff_cmd,
    env_cmd,
    exec_cmd,
    explain_cmd,
    labels_cmd,
    matrix_cmd,
    probe_cmd,
    serve_cmd,
    verify_cmd,
)
from kernelpolicy.cli.common import disable_abbreviations, run_guarded

_EPILOG = """\
examples:
  kernelpolicy probe                      what this machine is, as a table
  kernelpolicy probe --json > node.json   the same as a platform snapshot
  kernelpolicy probe --platform node.json show a snapshot taken elsewhere
  kernelpolicy explain                    which kernel each feature uses here, and why
  kernelpolicy explain --platform node.json --env VLLM_ROCM_USE_AITER=1
  kernelpolicy check my-policies/         validate policy files, every mistake located
  kernelpolicy matrix                     decisions on every shipped platform fixture
  kernelpolicy env --engine vllm          the variables and flags that make vLLM follow them
  kernelpolicy exec --engine vllm -- vllm serve MODEL   start vLLM with those settings
  kernelpolicy verify                     conformance suite here; results become evidence
  kernelpolicy serve                      the daemon (gRPC, flagd-compatible), explain table first
  kernelpolicy status                     how a running daemon is: revision, last reload error
  kernelpolicy labels                     node labels for Node Feature Discovery
  kernelpolicy diff --against NEW/        what a policy change does to a fleet's nodes
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelpolicy",
        description="Which GPU kernel runs on this machine, and why.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"kernelpolicy {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
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
    disable_abbreviations(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 a finding such as an error, 2 bad usage or
    input; see docs/cli.md)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return run_guarded(args)
