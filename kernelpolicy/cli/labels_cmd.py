"""``kernelpolicy labels``: this node's facts and decisions as Kubernetes node labels."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kernelpolicy.cli.common import (
    HelpFormatter,
    add_resolve_options,
    counted,
    environment,
    local_policies,
    local_settings,
    obtain_platform,
)


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "labels",
        help="node labels for Node Feature Discovery (features.d) or as JSON",
        description=(
            "Resolve the policies for this machine (or --platform FILE) and print the node's "
            "labels: GPU vendor, product, arch (the gfx target on AMD), compute capability, "
            "driver and kernel-library versions, the implementation chosen per feature, and "
            "the kernels 'kernelpolicy verify' passed or failed here. --write DIR replaces "
            "DIR/kernelpolicy atomically, in the format Node Feature Discovery's local source "
            "reads from /etc/kubernetes/node-feature-discovery/features.d."
        ),
        epilog=(
            "examples:\n"
            "  kernelpolicy labels\n"
            "  kernelpolicy labels --format json --platform node.json\n"
            "  kernelpolicy labels \\\n"
            "      --write /etc/kubernetes/node-feature-discovery/features.d"
        ),
        formatter_class=HelpFormatter,
    )
    add_resolve_options(parser)
    output = parser.add_mutually_exclusive_group()
    output.add_argument(
        "--format", choices=("nfd", "json"), default="nfd",
        help="nfd: features.d lines 'key=value' (default); json: an object of labels",
    )  # fmt: skip
    output.add_argument(  # as every other command spells it
        "--json", dest="format", action="store_const", const="json",
        help="the same as --format json",
    )  # fmt: skip
    parser.add_argument(
        "--write", type=Path, metavar="DIR",
        help="replace DIR/kernelpolicy (the NFD feature file) instead of printing",
    )  # fmt: skip
    parser.add_argument(
        "--prefix", default=None, metavar="DOMAIN",
        help="label prefix (default kernelpolicy.feature.node.kubernetes.io)",
    )  # fmt: skip
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kernelpolicy.inputs import gather
    from kernelpolicy.labels import PREFIX, nfd_text, node_labels

    # The policy files and the store are on this machine: where they are and whether to trust
    # them come from this process (and --env), never from a snapshot's recorded environment.
    # The labels show the store whether or not the policies read it.
    local = local_settings(args)
    policies = local_policies(args, local)
    inputs = gather(
        policies,
        local,
        env=lambda platform: environment(args, platform),
        platform=lambda libraries, patterns: obtain_platform(
            args, libraries=libraries, env_patterns=patterns
        ),
        evidence=True,
    )
    resolution = inputs.resolve()
    evidence = inputs.evidence
    assert evidence is not None  # asked for
    labels = node_labels(resolution, evidence, prefix=args.prefix or PREFIX)
    if args.format == "json":
        text = json.dumps(labels, indent=2) + "\n"
    else:
        text = nfd_text(labels, resolution.fingerprint, resolution.policies.digest)
    if args.write is not None:
        from kernelpolicy.labels import write_feature_file

        path = write_feature_file(args.write, text)
        print(f"wrote {counted(len(labels), 'label')} to {path}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
