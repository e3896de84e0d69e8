"""``kernelpolicy matrix``: every feature's decision on every platform fixture, as one table."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelpolicy.cli.common import (
    environment,
    local_environment,
    policy_load_options,
    policy_paths,
)
from kernelpolicy.errors import PlatformFileError

if TYPE_CHECKING:
    from kernelpolicy.engine.model import Decision


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "matrix",
        help="decisions of every feature on every platform snapshot",
        description=(
            "Resolve every platform snapshot in a directory (default: the shipped fixtures) and "
            "print feature x platform. CI uses it to know which kernel paths to test. Exits 1 "
            "when any cell is an error (ERROR), like explain."
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
        "--policies",
        metavar="PATH",
        action="append",
        type=Path,
        help="policy file or directory (repeatable; default: KERNELPOLICY_POLICY_PATHS or the "
        "bundled pack)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print {platform: {feature: {impl, reason, error, error_code}}} as JSON",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kernelpolicy.api import load_policies_cached
    from kernelpolicy.cli.render import table
    from kernelpolicy.engine.forces import check_forces
    from kernelpolicy.engine.resolve import resolve_policies
    from kernelpolicy.platform.model import load_platform
    from kernelpolicy.settings import settings_from

    snapshots = _snapshots(args.platforms)
    policies = load_policies_cached(
        policy_paths(args, local_environment(args)), **policy_load_options()
    )
    cells: dict[str, dict[str, Decision]] = {}
    for path in snapshots:
        platform = load_platform(path)
        env = environment(argparse.Namespace(platform=path, env=args.env), platform)
        overrides = settings_from(env).overrides
        check_forces(policies, env, overrides)
        resolution = resolve_policies(platform, env, policies, overrides)
        cells[path.stem] = dict(resolution.decisions)
    errors = any(d.error for row in cells.values() for d in row.values())
    if args.json:
        print(json.dumps({p: {f: _cell(d) for f, d in row.items()} for p, row in cells.items()},
                         indent=2))  # fmt: skip
        return 1 if errors else 0
    features = list(policies.features)
    rows = [[p, *(_word(cells[p][f]) for f in features)] for p in cells]
    print(table(["platform", *features], rows, indent=""))
    return 1 if errors else 0


def _snapshots(directory: Path | None) -> list[Path]:
    """The ``*.json`` snapshots of ``--platforms`` (default: the shipped fixtures)."""
    from kernelpolicy.testing.machines import fixture_dir

    if directory is None:
        directory = fixture_dir() / "platforms"
    elif not directory.is_dir():
        what = "no such directory" if not directory.exists() else "not a directory"
        raise PlatformFileError(
            f"--platforms {directory}: {what}; expected a directory of platform snapshots "
            "(*.json, as 'kernelpolicy probe --json' writes them)"
        )
    snapshots = sorted(directory.glob("*.json"))
    if not snapshots:
        raise PlatformFileError(
            f"--platforms {directory}: no *.json platform snapshots in it "
            "(write one with 'kernelpolicy probe --json > DIR/NAME.json')"
        )
    return snapshots


def _word(decision: Decision) -> str:
    return decision.impl if decision.impl else ("ERROR" if decision.error else "-")


def _cell(decision: Decision) -> dict[str, Any]:
    """One --json cell: the implementation (or null), the reason, and any error in full."""
    return {
        "impl": decision.impl,
        "reason": decision.reason.value,
        "error": decision.error,
        "error_code": decision.error_code.value if decision.error_code else None,
    }
