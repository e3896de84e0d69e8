"""``kernelpolicy explain``: which implementation each feature uses, and why."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kernelpolicy.cli.common import add_resolve_options, environment, obtain_platform
from kernelpolicy.cli.render import explain_table
from kernelpolicy.errors import ResolutionError


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "explain",
        help="show each feature's implementation and why (exit 1 if any is an error)",
        description=(
            "Resolve the policies for this machine (or --platform FILE) and show, per feature, "
            "the chosen implementation, every rejected candidate with the check it failed, hints "
            "and warnings. Exits 1 when any decision is an error."
        ),
        epilog=(
            "examples:\n"
            "  kernelpolicy explain\n"
            "  kernelpolicy explain sampler.top_k_top_p --platform node.json --json\n"
            "  kernelpolicy explain --platform mi300x.json --env VLLM_ROCM_USE_AITER=1"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("features", nargs="*", metavar="FEATURE", help="only these features")
    add_resolve_options(parser)
    parser.add_argument("--json", action="store_true", help="print the explain JSON document")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kernelpolicy.api import load_policies_cached
    from kernelpolicy.engine.resolve import resolve_policies
    from kernelpolicy.engine.switches import FORCE_PREFIX
    from kernelpolicy.settings import settings_from

    base_env = environment(args, None) if args.platform is None else None
    settings = settings_from(base_env if base_env is not None else {})
    policies = load_policies_cached(args.policies or settings.policy_paths)
    platform = obtain_platform(
        args,
        libraries=sorted(policies.library_names),
        env_patterns=[*sorted(policies.env_names), FORCE_PREFIX + "*"],
    )
    env = environment(args, platform)
    answer_settings = settings_from(env)
    evidence = None
    if policies.needs_evidence:
        from kernelpolicy.conformance.evidence import load_evidence

        # The store is on this machine: where it is and whether to trust it come from this
        # process (and --env), never from a snapshot's recorded environment.
        local = settings_from(environment(argparse.Namespace(platform=None, env=args.env), None))
        evidence = load_evidence(
            platform, local.cache_dir, allow_untrusted=local.allow_untrusted_files
        )
    resolution = resolve_policies(platform, env, policies, answer_settings.overrides, evidence)
    unknown = [f for f in args.features if f not in resolution.decisions]
    if unknown:
        raise ResolutionError(
            f"unknown feature {unknown[0]!r}; "
            f"the policies define: {', '.join(resolution.decisions)}"
        )
    chosen = args.features or list(resolution.decisions)
    if args.json:
        document = resolution.to_dict()
        document["decisions"] = {f: document["decisions"][f] for f in chosen}
        json.dump(document, sys.stdout, indent=2)
        print()
    else:
        print(explain_table(resolution, chosen))
    return 1 if any(resolution.decisions[f].error for f in chosen) else 0
