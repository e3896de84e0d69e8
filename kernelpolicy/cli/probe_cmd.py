"""``kernelpolicy probe``: print what the probe found, as a table or as the JSON snapshot."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kernelpolicy.cli.render import platform_table
from kernelpolicy.platform.model import Platform, load_platform


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "probe",
        help="detect GPUs, driver, torch build and kernel libraries",
        description=(
            "Detect the GPU vendor, devices, driver, torch build and kernel library versions "
            "without creating a GPU context. What could not be read is listed under probe "
            "errors; the probe itself never fails."
        ),
    )
    parser.add_argument(
        "--json", action="store_true", help="print the kernelpolicy.platform/v1 snapshot"
    )
    parser.add_argument(
        "--platform", metavar="FILE", type=Path,
        help="show a snapshot file (from 'probe --json' on another machine) instead of probing",
    )  # fmt: skip
    parser.add_argument(
        "--root", metavar="DIR", type=Path, default=Path("/"),
        help="filesystem root for sysfs and /opt/rocm reads (point it at a fake tree)",
    )  # fmt: skip
    parser.add_argument("--no-nvml", action="store_true", help="do not query NVML")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    platform = obtain(args)
    if args.json:
        print(platform.to_json())
    else:
        print(platform_table(platform))
    return 0


def obtain(args: argparse.Namespace) -> Platform:
    """The platform a command answers for: ``--platform FILE`` or a probe of this machine."""
    if getattr(args, "platform", None) is not None:
        if str(args.platform) == "-":
            return Platform.from_dict(_read_stdin(), source="<stdin>")
        return load_platform(args.platform)
    from kernelpolicy.platform.probing import probe

    kwargs: dict[str, Any] = {"root": getattr(args, "root", Path("/"))}
    if getattr(args, "no_nvml", False):
        kwargs["nvml"] = None
    return probe(**kwargs)


def _read_stdin() -> Any:
    import json

    from kernelpolicy.errors import PlatformFileError

    try:
        return json.load(sys.stdin)
    except json.JSONDecodeError as exc:
        raise PlatformFileError(f"<stdin>:{exc.lineno}:{exc.colno}: not JSON ({exc.msg})") from None
