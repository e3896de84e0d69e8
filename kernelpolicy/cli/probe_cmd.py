"""``kernelpolicy probe``: print what the probe found, as a table or as the JSON snapshot."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kernelpolicy.cli.common import HelpFormatter, add_platform_option, obtain_platform
from kernelpolicy.errors import SettingsError
from kernelpolicy.render import platform_table


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "probe",
        help="detect GPUs, driver, torch build and kernel libraries",
        description=(
            "Detect the GPU vendor, devices, driver, torch build and kernel library versions "
            "without creating a GPU context. What could not be read is listed under probe "
            "errors; the probe itself never fails. Exits 2 when --root or --platform is wrong."
        ),
        epilog=(
            "examples:\n"
            "  kernelpolicy probe\n"
            "  kernelpolicy probe --json > node.json\n"
            "  kernelpolicy probe --platform node.json\n"
            "  kernelpolicy probe --root kernelpolicy/fixtures/roots/mi300x"
        ),
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "--json", action="store_true", help="print the kernelpolicy.platform/v1 snapshot"
    )
    add_platform_option(parser)
    parser.add_argument(
        "--root", metavar="DIR", type=Path, default=Path("/"),
        help="filesystem root for sysfs and /opt/rocm reads (point it at a fake tree; it must "
        "exist)",
    )  # fmt: skip
    parser.add_argument("--no-nvml", action="store_true", help="do not query NVML")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if not args.root.is_dir():
        # The probe never fails: on a missing root it would read nothing and report "no GPU",
        # which looks like an answer. A root that is not there is a mistake in the command.
        what = "no such directory" if not args.root.exists() else "not a directory"
        raise SettingsError(
            f"--root {args.root}: {what}; expected the directory to read sysfs and /opt/rocm "
            "under (a fake tree, or / for this machine)"
        )
    kwargs: dict[str, Any] = {"root": args.root}
    if args.no_nvml:
        kwargs["nvml"] = None
    platform = obtain_platform(args, **kwargs)
    if args.json:
        print(platform.to_json())
    else:
        print(platform_table(platform))
    return 0
