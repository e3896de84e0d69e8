"""``kernelpolicy explain``: which implementation each feature uses, and why."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from kernelpolicy.cli.common import (
    HelpFormatter,
    add_resolve_options,
    add_tls_client_options,
    refuse_tls_without,
)
from kernelpolicy.cli.exits import add_model_kind_option, report_exit, scope_of
from kernelpolicy.cli.provenance import AnswerEnv, value_sources
from kernelpolicy.encoding import escaped_lines
from kernelpolicy.errors import ResolutionError
from kernelpolicy.render import explain_table, in_process
from kernelpolicy.suggest import did_you_mean

if TYPE_CHECKING:
    from kernelpolicy.engine.resolution import Resolution


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "explain",
        help="show each feature's implementation and why (exit 1 if any is an error)",
        description=(
            "Resolve the policies for this machine (or --platform FILE) and show, per feature, "
            "the chosen implementation, every rejected candidate with the check it failed, hints "
            "and warnings. Exits 1 when a decision is an error for every model or for "
            "--model-kind (default mha, as env and exec); each such error is named on stderr. "
            "With --address, also when the daemon's last reload failed: it serves the last good "
            "policies, which the answer shows (as 'kernelpolicy status' says it)."
        ),
        epilog=(
            "exit status: 0 no decision counted is an error (with --address: and the daemon's "
            "last reload succeeded); 1 a decision is an error for every model or for "
            "--model-kind, or (--address) the daemon's last reload FAILED and it serves the "
            "last good policies (one line on stderr, policy_error in --json); 2 bad usage, a "
            "bad policy file or snapshot, an unknown feature, or no daemon answered\n\n"
            "examples:\n"
            "  kernelpolicy explain\n"
            "  kernelpolicy explain sampler.top_k_top_p --platform node.json --json\n"
            "  kernelpolicy explain --platform mi300x.json --env VLLM_ROCM_USE_AITER=1\n"
            "  kernelpolicy explain --address unix:/run/kernelpolicy/kernelpolicy.sock"
        ),
        formatter_class=HelpFormatter,
    )
    parser.add_argument("features", nargs="*", metavar="FEATURE", help="only these features")
    add_resolve_options(parser)
    parser.add_argument(
        "--address", metavar="ADDR",
        help="what the running daemon at ADDR (unix:/path or host:port) decides for its node, "
        "from its snapshot, environment and policies (instead of --platform, --env, --policies)",
    )  # fmt: skip
    add_tls_client_options(parser)
    parser.add_argument("--json", action="store_true", help="print the explain JSON document")
    add_model_kind_option(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kernelpolicy.cli.bridge_render import (
        add_engines_to_document,
        all_engine_settings,
        engines_section,
    )
    from kernelpolicy.cli.resolving import resolve_explained, resolve_from_daemon

    if args.address is not None:
        resolution, inputs = resolve_from_daemon(args)
    else:
        refuse_tls_without(args, "--address")
        resolution, inputs = resolve_explained(args)
        _note_empty_directories(args)
    env = inputs.env
    unknown = [f for f in args.features if f not in resolution.decisions]
    if unknown:
        raise ResolutionError(
            f"unknown feature {unknown[0]!r}{did_you_mean(unknown[0], resolution.decisions)}; "
            f"the policies define: {', '.join(resolution.decisions)}"
        )
    chosen = args.features or list(resolution.decisions)
    engines = all_engine_settings(resolution, env)
    if args.address is None:  # a daemon's implementations are imported on its node, not here
        _warn_unimportable(resolution, chosen)
    if args.json:
        document = _document(resolution, chosen, inputs, daemon=args.address is not None)
        add_engines_to_document(document, engines)
        json.dump(document, sys.stdout, indent=2)
        print()
    else:
        said = {
            feature: [(s.line(inputs.snapshot), s.worth_showing)
                      for s in value_sources(resolution, feature, inputs)]
            for feature in chosen
        }  # fmt: skip
        section = engines_section(engines, chosen).removeprefix("\n")
        table = explain_table(resolution, chosen, engines=section, sources=said)
        # What a daemon sent (policy texts, halt reasons, its environment's values) may hold an
        # escape sequence: each line is printed with its control characters shown, not sent.
        print(escaped_lines(table))
    stale = args.address is not None and _report_stale(args.address, resolution)
    decisions = [(f, resolution.decisions[f]) for f in chosen]
    return max(report_exit(resolution.policies, decisions, args.model_kind), int(stale))


def _document(
    resolution: Resolution, chosen: list[str], inputs: AnswerEnv, *, daemon: bool
) -> dict[str, Any]:
    """The explain JSON document of the ``chosen`` features (a daemon's own state beside it,
    as status --json has it), before the engines' settings are added."""
    document = resolution.to_dict()
    if daemon:
        document = {**document, **_daemon_state(resolution)}
    document["decisions"] = {f: document["decisions"][f] for f in chosen}
    for feature, entry in document["decisions"].items():
        entry["model_kind"] = scope_of(resolution.policies, feature)
        entry["in_process"] = in_process(resolution.decisions[feature])
        sources = value_sources(resolution, feature, inputs)
        entry["sources"] = [source.to_dict() for source in sources]
    return document


def _daemon_state(resolution: Resolution) -> dict[str, Any]:
    """The daemon's revision and last reload error (None: it succeeded), whole as it sent it."""
    return {"revision": resolution.revision, "policy_error": resolution.policy_error}


def _report_stale(address: str, resolution: Resolution) -> bool:
    """Say on stderr, in one line, that the daemon at ``address`` serves the last good
    policies because its last reload failed (``kernelpolicy status`` exits 1 on it too), and
    whether it does. The error is the daemon's text: its lines joined, cut and escaped."""
    from kernelpolicy.encoding import one_line

    error = resolution.policy_error
    if not error:
        return False
    said = one_line("; ".join(line for line in error.splitlines() if line.strip()))
    print(f"kernelpolicy: exit 1: {one_line(address)}: last reload FAILED, serving the last good "
          f"policies: {said}", file=sys.stderr)  # fmt: skip
    return True


def _note_empty_directories(args: argparse.Namespace) -> None:
    """Say on stderr that each directory among the policy paths that holds no policy file adds
    nothing (an empty ``+/etc/kernelpolicy/policies.d`` from a ConfigMap), in ``check``'s
    words: the policies resolved all the same, from the others."""
    from kernelpolicy.cli.common import local_settings
    from kernelpolicy.policy.files import EMPTY_DIRECTORY, list_policy_paths

    given = args.policies or local_settings(args).policy_paths
    for directory in list_policy_paths(given).empty_directories:
        print(f"kernelpolicy: note: {directory}: {EMPTY_DIRECTORY}; it adds no policies",
              file=sys.stderr)  # fmt: skip


def _warn_unimportable(resolution: Resolution, chosen: list[str]) -> None:
    """Say on stderr when a chosen implementation's ``entry`` cannot be imported here."""
    from kernelpolicy.policy.entries import entry_problem

    for name in chosen:
        feature = resolution.policies.features.get(name)
        impl = resolution.decisions[name].impl
        for candidate in feature.candidates if feature is not None else ():
            entry = candidate.spec.entry
            if candidate.impl == impl and entry and (problem := entry_problem(entry)):
                print(f"warning: {name} -> {impl}: entry cannot be imported here: {problem}",
                      file=sys.stderr)  # fmt: skip
