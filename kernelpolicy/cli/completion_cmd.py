"""``kernelpolicy completion bash|zsh``: a shell completion script, from the parser itself."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kernelpolicy.cli.common import HelpFormatter


def register(commands: Any, whole: argparse.ArgumentParser) -> None:
    """``completion``, completing every command of ``whole`` (the parser being built)."""
    parser = commands.add_parser(
        "completion",
        help="print a shell completion script (bash or zsh)",
        description=(
            "Print a completion script for bash or zsh, generated from this command line's own "
            "parser: commands, options, their choices, and file names where a file is expected."
        ),
        epilog=(
            "examples:\n"
            "  source <(kernelpolicy completion bash)          this shell only\n"
            "  kernelpolicy completion bash > /etc/bash_completion.d/kernelpolicy\n"
            '  kernelpolicy completion zsh > "${fpath[1]}/_kernelpolicy"'
        ),
        formatter_class=HelpFormatter,
    )
    parser.add_argument("shell", choices=["bash", "zsh"], help="the shell to complete for")
    parser.set_defaults(run=run, whole=whole)


def run(args: argparse.Namespace) -> int:
    from kernelpolicy.cli.completion import bash_script, zsh_script

    parser: argparse.ArgumentParser = args.whole
    sys.stdout.write(bash_script(parser) if args.shell == "bash" else zsh_script(parser))
    return 0
