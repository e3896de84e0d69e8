"""``kernelpolicy matrix``: every feature's decision on every platform fixture, as one table."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelpolicy.cli.common import (
    HelpFormatter,
    add_answer_options,
    environment,
    local_policies,
    local_settings,
)
from kernelpolicy.cli.exits import add_model_kind_option, report_platforms_exit, scope_of
from kernelpolicy.errors import PlatformFileError, ResolutionError
from kernelpolicy.suggest import did_you_mean

if TYPE_CHECKING:
    from kernelpolicy.engine.model import Decision
    from kernelpolicy.policy.compiled import PolicySet
    from kernelpolicy.settings import Settings

OUTPUTS = ("narrow", "wide", "json")


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "matrix",
        help="decisions of every feature on every platform snapshot",
        description=(
            "Resolve every platform snapshot in a directory (default: the shipped fixtures) and "
            "print platform x feature. CI uses it to know which kernel paths to test. The "
            "default table leaves out the features decided alike on every platform (listed "
            "under it) to fit a terminal; -o wide shows every column. Exits 1 when a cell is "
            "an error for every model or for --model-kind (default mha), each named on stderr."
        ),
        epilog=(
            "examples:\n  kernelpolicy matrix\n"
            "  kernelpolicy matrix sampler.top_k_top_p attention.backend\n"
            "  kernelpolicy matrix -o wide --env VLLM_ROCM_USE_AITER=1\n"
            "  kernelpolicy matrix -o json"
        ),
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "features", nargs="*", metavar="FEATURE", help="only these features (columns)"
    )
    parser.add_argument(
        "--platforms", metavar="DIR", type=Path, help="directory of *.json snapshots"
    )
    add_answer_options(parser, env_help="set on every platform (repeatable; K= unsets it)")
    parser.add_argument(
        "-o", "--output", choices=OUTPUTS, default="narrow",
        help="narrow (default: the features that differ between platforms), wide (every "
        "feature), json ({platform: {feature: {impl, reason, error, error_code, model_kind}}})",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="the same as -o json")
    add_model_kind_option(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    local = local_settings(args)
    policies = local_policies(args, local)
    features = _features(args.features, list(policies.features))
    cells = _resolve_all(args, policies, local)
    output = "json" if args.json else args.output
    if output == "json":
        document = {
            p: {f: _cell(row[f], scope_of(policies, f)) for f in features}
            for p, row in cells.items()
        }
        print(json.dumps(document, indent=2))
    else:
        wide = output == "wide" or bool(args.features)  # columns chosen: all of them shown
        print(matrix_table(cells, features, policies, wide=wide))
    rows = {f"{p}: ": [(f, row[f]) for f in features] for p, row in cells.items()}
    return report_platforms_exit(policies, rows, args.model_kind)


def _features(asked: list[str], known: list[str]) -> list[str]:
    """The columns: the features asked for (each must exist), else every feature."""
    for name in asked:
        if name not in known:
            raise ResolutionError(
                f"unknown feature {name!r}{did_you_mean(name, known)}; the policies define: "
                f"{', '.join(known)}"
            )
    return list(dict.fromkeys(asked)) or known


def _resolve_all(
    args: argparse.Namespace, policies: PolicySet, local: Settings
) -> dict[str, dict[str, Decision]]:
    """Platform (the snapshot's file stem) -> its decisions (``local``: this machine's settings,
    for the evidence store)."""
    from kernelpolicy.inputs import gather
    from kernelpolicy.platform.model import load_platform

    cells: dict[str, dict[str, Decision]] = {}
    for path in _snapshots(args.platforms):
        platform = load_platform(path)
        env = environment(argparse.Namespace(platform=path, env=args.env), platform)
        resolution = gather(policies, local, env=env, platform=platform).resolve()
        cells[path.stem] = dict(resolution.decisions)
    return cells


def matrix_table(
    cells: dict[str, dict[str, Decision]], features: list[str], policies: PolicySet, *, wide: bool
) -> str:
    """Platform x feature; unless ``wide``, the features decided alike everywhere become one
    line under the table (``-o wide`` shows them as columns)."""
    from kernelpolicy.render import table

    words = {
        p: {f: _word(row[f], scope_of(policies, f)) for f in features} for p, row in cells.items()
    }
    shown, alike = features, []
    if not wide and len(cells) > 1:
        shown = [f for f in features if len({w[f] for w in words.values()}) > 1]
        alike = [f for f in features if f not in shown]
    rows = [[p, *(w[f] for f in shown)] for p, w in words.items()]
    out = table(["platform", *shown], rows, indent="") if shown else ""
    if alike:
        import textwrap

        same = ", ".join(f"{f} {next(iter(words.values()))[f]}" for f in alike)
        line = f"alike on every platform ({len(alike)}; -o wide shows them): {same}"
        out += "\n\n" + textwrap.fill(line, width=100, subsequent_indent="  ")
    return out.lstrip("\n")


def _snapshots(directory: Path | None) -> list[Path]:
    """The ``*.json`` snapshots of ``--platforms`` (default: the shipped fixtures)."""
    from kernelpolicy.platform.fixtures import fixture_dir

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


def _word(decision: Decision, scope: str | None) -> str:
    if decision.error:
        return f"ERROR ({scope})" if scope else "ERROR"
    return decision.impl or "-"


def _cell(decision: Decision, scope: str | None) -> dict[str, Any]:
    """One JSON cell: the implementation (or null), the reason, any error in full, and the
    kind of model the feature matters to (null: every model)."""
    return {
        "impl": decision.impl,
        "reason": decision.reason.value,
        "error": decision.error,
        "error_code": decision.error_code.value if decision.error_code else None,
        "model_kind": scope,
    }
