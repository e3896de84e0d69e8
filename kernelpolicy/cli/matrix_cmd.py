"""``kernelpolicy matrix``: every feature's decision on every platform fixture, as one table."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from kernelpolicy.cli.common import allow_untrusted_files, environment


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "matrix",
        help="decisions of every feature on every platform snapshot",
        description=(
            "Resolve every platform snapshot in a directory (default: the shipped fixtures) and "
            "print feature x platform. CI uses it to know which kernel paths to test."
        ),
        epilog=(
            "examples:\n  kernelpolicy matrix\n"
            "  kernelpolicy matrix --env VLLM_ROCM_USE_AITER=1 --json"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--platforms", metavar="DIR", type=Path, help="directory of *.json snapshots"
    )
    parser.add_argument(
        "--env", metavar="K=V", action="append", default=[],
        help="set on every platform (repeatable; K= unsets)",
    )  # fmt: skip
    parser.add_argument(
        "--policies", metavar="PATH", action="append", type=Path, help="policy file or directory"
    )
    parser.add_argument(
        "--json", action="store_true", help="print {platform: {feature: impl}} as JSON"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kernelpolicy.api import load_policies_cached
    from kernelpolicy.cli.render import table
    from kernelpolicy.engine.resolve import resolve_policies
    from kernelpolicy.platform.model import load_platform
    from kernelpolicy.settings import bundled_policy_dir, settings_from
    from kernelpolicy.testing.machines import fixture_dir

    directory = args.platforms or fixture_dir() / "platforms"
    snapshots = sorted(directory.glob("*.json"))
    policies = load_policies_cached(
        args.policies or [bundled_policy_dir()], allow_untrusted=allow_untrusted_files()
    )
    cells: dict[str, dict[str, str]] = {}
    for path in snapshots:
        platform = load_platform(path)
        env = environment(argparse.Namespace(platform=path, env=args.env), platform)
        resolution = resolve_policies(platform, env, policies, settings_from(env).overrides)
        cells[path.stem] = {
            name: d.impl if d.impl else ("ERROR" if d.error else "-")
            for name, d in resolution.decisions.items()
        }
    if args.json:
        print(json.dumps(cells, indent=2))
        return 0
    features = list(policies.features)
    rows = [[p, *(cells[p][f] for f in features)] for p in cells]
    print(table(["platform", *features], rows, indent=""))
    return 0
