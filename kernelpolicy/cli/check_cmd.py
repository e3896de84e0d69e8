"""``kernelpolicy check``: validate policy files, with every mistake located."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from kernelpolicy.cli.common import HelpFormatter


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "check",
        help="validate policy files (exit 1 on any mistake)",
        description=(
            "Validate policy files: trust (owner and mode), size and nesting limits, TOML "
            "syntax, unknown keys, version specifiers, CEL expressions and their limits, "
            "implementation names, candidates that can never be chosen, and (with --platform) "
            "workarounds whose lift condition is already met. Then resolve the set on every "
            "bundled platform fixture (and each --platform), as resolve() would: a failure "
            "there, or a [[disable]] that leaves a feature with no implementation, is an error. "
            "Every mistake is reported with file, line, feature and key."
        ),
        epilog=(
            "examples:\n  kernelpolicy check\n"
            "  kernelpolicy check my-policies/ --platform node.json\n"
            "  kernelpolicy check +policies.d/ incident.toml"
        ),
        formatter_class=HelpFormatter,
        option_notes={
            "--policies": "check takes the policy paths as arguments: kernelpolicy check "
            "PATH..., +DIR adding DIR to the bundled pack"
        },
    )
    parser.add_argument(
        "paths",
        nargs="*",
        type=Path,
        metavar="PATH",
        help="files or directories (default: KERNELPOLICY_POLICY_PATHS, else the bundled "
        "pack); +DIR adds DIR to the bundled pack, as --policies +DIR does for the other "
        "commands",
    )
    parser.add_argument(
        "--platform", metavar="FILE", type=Path, action="append", default=[],
        help="also report workarounds that may be lifted on this platform (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--json", action="store_true", help="print {ok, files, features, issues, notes} as JSON"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kernelpolicy.check import check_policies
    from kernelpolicy.cli.common import counted, local_settings

    # The policy paths and the trust opt-out of whoever runs check, as every command reads
    # them (check has no --env): with no PATH, what this user's workers would load.
    settings = local_settings(args)
    report = check_policies(
        args.paths or list(settings.policy_paths),
        args.platform,
        allow_untrusted=settings.allow_untrusted_files,
    )
    files, policies, issues = report.files, report.policies, report.issues
    notes = [*report.notes, *_repeated(args.paths or list(settings.policy_paths))]
    if args.json:
        print(json.dumps({
            "ok": not issues,
            "files": files,
            "features": sorted(policies.features) if policies else [],
            "issues": [issue.__dict__ for issue in issues],
            "notes": notes,
        }, indent=2))  # fmt: skip
        return 1 if issues else 0
    for note in notes:
        print(f"note: {note}")
    if issues:
        for issue in issues:
            print(issue)
        print(f"{counted(len(issues), 'problem')} in {counted(len(files), 'file')}")
    else:
        assert policies is not None
        print(
            f"ok: {counted(len(policies.features), 'feature')}, "
            f"{counted(len(policies.gates), 'gate')} in {counted(len(files), 'file')}"
        )
    return 1 if issues else 0


def _repeated(paths: list[Path]) -> list[str]:
    """A note for each path given that leads where one given before it does (read once): the
    bundled pack named as such, since ``+policies`` in a source tree is the pack twice."""
    from kernelpolicy.errors import PolicyError
    from kernelpolicy.policy.files import list_policy_paths
    from kernelpolicy.settings import bundled_policy_dir

    try:
        repeated = list_policy_paths(paths).repeated
    except PolicyError:  # the report has it as an issue
        return []
    bundled = bundled_policy_dir()
    return [
        f"{path}: the bundled pack ({bundled} leads there), given again; read once"
        if earlier == bundled
        else f"{path}: the same as {earlier}, given before it; read once"
        for path, earlier in repeated
    ]
