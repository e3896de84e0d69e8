"""``kernelpolicy diff``: what a policy change does to a fleet, per class of identical nodes."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from kernelpolicy.cli.common import (
    HelpFormatter,
    add_tls_client_options,
    counted,
    refuse_tls_without,
    tls_credentials,
)
from kernelpolicy.errors import SettingsError
from kernelpolicy.limits import DAEMON_TIMEOUT_SECONDS, MAX_ROLLOUT_STEPS

_EPILOG = """\
examples:
  kernelpolicy diff --against new-policies/
  kernelpolicy diff --against +policies.d/ --platforms snapshots/ --exit-code
  kubectl get nodes -o json > nodes.json
  kernelpolicy diff --against +policies.d/ --platforms nodes.json --json
  kernelpolicy diff --against +policies.d/ --daemons node1:50151,node2:50151
  kernelpolicy diff --against +new/ --daemons @daemons.txt --daemon-timeout 2
  kernelpolicy diff --against +new/ --daemons node1:50151 --tls-ca ca.pem

with --daemons, each daemon's platform snapshot is read over gRPC (unix:PATH or HOST:PORT;
TLS to TCP daemons with --tls-ca, and --tls-cert/--tls-key where they require client
certificates); one that does not answer within --daemon-timeout is named on stderr and
counted, not fatal, unless none answers (exit 2)

with --daemons, diff also says which policies each daemon runs (the digest of the policy texts
it sends, against --policies' and --against's): "rollout progress: N of M daemons run
--policies, K run --against, J other, F failing", and names each daemon whose last reload
failed (it resolves with its last good policies) or that runs other policies

each staged rollout that the change touches gets its steps, with the nodes that join at each
step (--json: every node at each step); changes that no rollout stages are counted apart: they
land on all their nodes at the next reload

exit status: 0 (with --exit-code: no node changes), 1 (--exit-code: some node changes),
2 bad input (a bad snapshot is named), or no daemon of --daemons answered; a daemon that does
not answer, runs other policies, answers otherwise or failed its last reload is warned of and
never changes the status (--exit-code counts changes only)
"""


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "diff",
        help="what a policy change does to a fleet: decisions and engine settings per node class",
        description=(
            "Compare two policy sets over a fleet's inventory: per class of identical nodes "
            "(with how many), every decision and every vLLM and SGLang setting that changes, "
            "and the share of nodes each change reaches; for each staged rollout of the new "
            "policies, how many nodes it reaches at each step."
        ),
        epilog=_EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "--against", metavar="PATH", action="append", type=Path, required=True,
        help="the new policies: file or directory, repeatable, +DIR adds to the bundled pack",
    )  # fmt: skip
    parser.add_argument(
        "--policies", metavar="PATH", action="append", type=Path,
        help="the policies the fleet runs now (default: KERNELPOLICY_POLICY_PATHS or the "
        "bundled pack); file or directory, repeatable, +DIR adds to the bundled pack",
    )  # fmt: skip
    inventory = parser.add_mutually_exclusive_group()
    inventory.add_argument(
        "--platforms", metavar="DIR|FILE", type=Path,
        help="the inventory: a directory of 'probe --json' snapshots, one snapshot, or "
        "'kubectl get nodes -o json' output (default: the bundled platform fixtures)",
    )  # fmt: skip
    inventory.add_argument(
        "--daemons", metavar="ADDR,...|@FILE",
        help="the inventory: live daemons (unix:PATH or HOST:PORT, comma-separated, or @FILE "
        "with one a line), each one's platform snapshot read over gRPC",
    )  # fmt: skip
    parser.add_argument(
        "--daemon-timeout", metavar="SECONDS", type=float, default=DAEMON_TIMEOUT_SECONDS,
        help=f"seconds each daemon has to connect and to answer (default "
        f"{DAEMON_TIMEOUT_SECONDS:g})",
    )  # fmt: skip
    add_tls_client_options(parser)
    parser.add_argument(
        "--steps", metavar="P,P,...", default="1,5,25,50,100",
        help="percents at which to count each staged rollout (default 1,5,25,50,100; the "
        "policy's own percent is always counted)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    parser.add_argument(
        "--exit-code", action="store_true",
        help="exit 1 when some node changes, 0 when none does (as git diff --exit-code)",
    )  # fmt: skip
    parser.set_defaults(run=run)


def parse_steps(text: str) -> tuple[float, ...]:
    """``1,10,50`` -> (1.0, 10.0, 50.0).

    Raises:
        SettingsError: Not a list of percents 0-100, or more than ``MAX_ROLLOUT_STEPS``.
    """
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if len(parts) > MAX_ROLLOUT_STEPS:
        raise SettingsError(f"--steps: {len(parts)} steps is over MAX_ROLLOUT_STEPS")
    try:
        steps = tuple(float(p) for p in parts)
    except ValueError:
        steps = ()
    if not steps or not all(0 <= s <= 100 for s in steps):
        raise SettingsError(f"--steps {text[:80]!r}: expected percents 0-100 such as 1,10,50,100")
    finer = [s for s in steps if abs(s * 100 - round(s * 100)) > 1e-6]
    if finer:  # a rollout's percent has two decimals at most: a finer step is no stage
        raise SettingsError(
            f"--steps: {finer[0]:g} has more than two decimals (0.01% is a rollout's smallest step)"
        )
    return steps


def run(args: argparse.Namespace) -> int:
    from kernelpolicy.cli.common import local_policies, local_settings
    from kernelpolicy.fleet import diff_fleet
    from kernelpolicy.inputs import existing_policy_paths, load_policies_for

    steps = parse_steps(args.steps)
    local = local_settings(args)
    old = local_policies(args, local)
    new = load_policies_for(local, existing_policy_paths(args.against, "--against"))
    _say_what_is_dropped(old, new, args.against)
    inventory = _inventory(args)
    result = diff_fleet(
        inventory.nodes, old, new, steps=steps, skipped=inventory.skipped,
        unreachable=inventory.unreachable, duplicates=inventory.duplicates,
        running=getattr(inventory, "running", ()),
    )  # fmt: skip
    for why in inventory.unreachable:
        sys.stderr.write(f"kernelpolicy: warning: {why}\n")
    for warning in result.warnings:
        sys.stderr.write(f"kernelpolicy: warning: {warning.message}\n")
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
    else:
        source = "bundled fixtures" if args.platforms is None and args.daemons is None else None
        sys.stdout.write(render(result, source or inventory.source))
    return 1 if args.exit_code and result.changed else 0


def _say_what_is_dropped(old: Any, new: Any, against: list[Path]) -> None:
    """A warning where the new set has none of some of the current set's features and was
    given without ``+``: --against replaces the policies, a likely slip in CI."""
    dropped = [name for name in old.features if name not in new.features]
    if not dropped or any(str(path).startswith("+") for path in against):
        return
    named = ", ".join(dropped[:5]) + (f" and {len(dropped) - 5} more" if len(dropped) > 5 else "")
    sys.stderr.write(
        f"kernelpolicy: warning: the new set has none of {counted(len(dropped), 'feature')} of "
        f"the current one ({named}): --against PATH replaces the policies; +PATH adds to the "
        "bundled pack\n"
    )


def _inventory(args: argparse.Namespace) -> Any:
    """The inventory ``--platforms`` or ``--daemons`` names, else the bundled fixtures."""
    from kernelpolicy.fleet import daemon_addresses, load_daemons, load_inventory
    from kernelpolicy.platform.fixtures import fixture_dir

    if args.daemons is None:
        refuse_tls_without(args, "--daemons")
    if args.daemons is not None:
        if not args.daemon_timeout > 0:
            raise SettingsError(f"--daemon-timeout {args.daemon_timeout:g}: expected seconds > 0")
        addresses = daemon_addresses(args.daemons)
        from kernelpolicy.cli.status_cmd import quiet_grpc

        quiet_grpc()  # before grpc is imported: no C-core lines of its own on stderr
        credentials = tls_credentials(args, addresses)
        inventory = load_daemons(addresses, args.daemon_timeout, credentials)
        return replace(inventory, source=counted(len(addresses), "daemon"))
    if args.platforms is None:
        return load_inventory(fixture_dir() / "platforms")
    from kernelpolicy.errors import InventoryError

    try:
        return load_inventory(args.platforms)
    except InventoryError as exc:  # the file's problem, with the option that named it
        raise InventoryError(f"--platforms {exc}") from None


def _count(n: int, total: int, noun: str = "node") -> str:
    share = f"{100 * n / total:.1f}%" if total else "0%"
    return f"{n:,} of {counted(total, noun)} ({share})"


def render(result: Any, source: str) -> str:
    """The comparison as text: the fleet's totals, who answered, the halted kernels, each
    changed class, each rollout's steps."""
    classes = counted(len(result.classes), "class", "classes")
    lines = [
        f"{source}: {counted(result.nodes, 'node')} in {classes}; "
        f"{_count(result.changed_nodes, result.nodes)} change"
    ]
    lines += _who_answered(result) + _progress(result) + _halted(result)
    totals = result.totals()
    if totals:
        lines += ["", "changes across the fleet:"]
        lines += [f"  {_change(c)}  {_count(n, result.nodes)}" for c, n in totals]
    for cls in result.classes:
        if not cls.changes:
            continue
        lines += ["", *_class_head(cls)]
        lines += [
            f"  {_change(c)}  {_count(n, len(cls.nodes))}" for c, n in sorted(cls.changes.items())
        ]
    lines += _rollouts(result) + _unstaged(result)
    unchanged = sum(1 for cls in result.classes if not cls.changes)
    if unchanged:
        lines += ["", counted(unchanged, "unchanged class", "unchanged classes")]
    return "\n".join(lines) + "\n"


def _who_answered(result: Any) -> list[str]:
    """The daemons that answered (several on one host named), the nodes skipped, the daemons
    that did not answer."""
    lines = []
    if result.instances:  # daemons started apart, though from one snapshot file
        hosts, daemons = result.hosts(), result.daemons()
        given = len(result.instances)  # addresses: one daemon may answer at several
        lines.append(
            f"answered: {counted(len(daemons), 'daemon instance')} on "
            f"{counted(len(hosts), 'host')}"
            + (f" ({counted(given, 'address', 'addresses')})" if given != len(daemons) else "")
        )
        for host, names in hosts.items():
            if len(names) > 1:
                lines += named_lines(f"  {host}: {counted(len(names), 'daemon')}", names, " (", ")")
    if result.skipped:
        lines.append(f"skipped {counted(len(result.skipped), 'node')} without kernelpolicy labels")
    if result.unreachable:
        lines.append(f"unreachable: {counted(len(result.unreachable), 'daemon')}, not counted")
        lines += [f"  {why}" for why in result.unreachable]
    return lines


_LISTED = 10  # daemons named one a line in the text (--json has each)


def _progress(result: Any) -> list[str]:
    """Which policies the live daemons run (rollout progress), then each daemon that runs
    other policies or whose last reload failed, at most ``_LISTED`` of them."""
    progress = result.progress()
    if progress is None:
        return []
    lines = [
        f"rollout progress: {progress['policies']:,} of {counted(progress['daemons'], 'daemon')} "
        f"run --policies, {progress['against']:,} run --against, {progress['other']:,} other, "
        f"{progress['failing']:,} failing"
        + (
            "; --policies and --against are one set"
            if progress["against_digest"] == progress["policies_digest"]
            else ""
        )
    ]
    odd = [d for d in result.daemon_policies if d.runs.value == "other" or d.running.error]
    for daemon in odd[:_LISTED]:
        runs = (
            f"other policies (digest {daemon.running.digest})" if daemon.runs.value == "other"
            else _RUNS[daemon.runs.value]
        )  # fmt: skip
        failed = f"; last reload failed: {daemon.running.error}" if daemon.running.error else ""
        also = daemon.addresses[1:]
        at = f" (also {nodes_in_words(list(also))})" if also else ""
        lines.append(f"  {daemon.address}{at}: runs {runs}{failed}")
    if len(odd) > _LISTED:
        lines.append(f"  and {len(odd) - _LISTED:,} more (--json's daemon_policies has each)")
    return lines


_RUNS = {"policies": "--policies", "against": "--against", "both": "--policies (= --against)"}


def _rollouts(result: Any) -> list[str]:
    """Each staged rollout the change touches, its steps with the nodes joining at each (the
    first three named; --json has every node of every step), and how many it leaves out."""
    lines = []
    for rollout in (r for r in result.rollouts if r.changed):
        at = f"at {rollout.percent:g}%"
        lines += [
            "",
            f"disable {rollout.feature}/{rollout.impl} {at} (nodes switched off):"
            if rollout.disable
            else f"rollout {rollout.feature} -> {rollout.impl} {at}:",
        ]
        joining = rollout.joining() or [[] for _ in rollout.steps]
        for (percent, nodes), new in zip(rollout.steps, joining, strict=True):
            policy = "  (the policy)" if percent == rollout.percent else ""
            step = f"  {percent:g}%: {counted(nodes, 'node')}"
            if new:
                lines += named_lines(f"{step}; {len(new):,} join", new, ": ", policy)
            else:
                lines.append(f"{step}{policy}")
    untouched = sum(1 for r in result.rollouts if not r.changed)
    if untouched:
        lines += ["", f"{counted(untouched, 'staged rollout')} the change leaves as it is, not "
                  "shown (--json has each)"]  # fmt: skip
    return lines


def _unstaged(result: Any) -> list[str]:
    """The changes no rollout stages: they land on all their nodes at the next reload."""
    if not result.unstaged:
        return []
    lines = [
        "",
        f"not staged: lands on all {counted(len(result.unstaged_nodes), 'node')} at the next "
        "reload",
    ]
    lines += [f"  {_change(c)}  {counted(n, 'node')}" for c, n in result.unstaged[:_LISTED]]
    if len(result.unstaged) > _LISTED:
        lines.append(f"  and {len(result.unstaged) - _LISTED:,} more changes")
    return lines


def _halted(result: Any) -> list[str]:
    """The kernels halted on the daemons' nodes, each failure with its nodes, and whether the
    new policies keep each halt."""
    lines = []
    if result.halted:
        lines += ["", "halted kernels (as the daemons resolve; diff decides with them):"]
    for kernel in result.halted:
        fate = "keep" if kernel.kept else "lift (the feature's policy changes)"
        lines.append(f"  {kernel.key}: halted on {_count(len(kernel.nodes), result.nodes)}; "
                     f"the new policies {fate} the halt")  # fmt: skip
        lines += [f"    {why} ({nodes_in_words(names)})" for why, names in kernel.reasons.items()]
    return lines


WIDTH = 80
"""The text's columns: a list of node names never carries a line past them (a name alone longer
than a line is written whole); a class's summary, a daemon's error are as long as they are."""


def named_lines(head: str, names: list[str], opening: str, closing: str) -> list[str]:
    """``head``, ``opening``, the names in words (:func:`nodes_in_words`) and ``closing`` on one
    line where it fits ``WIDTH``; else ``head``, ``closing`` (unless it only closes a bracket)
    and a colon, and the first three names below, one a line, indented past the line's own
    indent, then how many more. ``closing``: ``")"``, ``"  (the policy)"`` or nothing."""
    inline = f"{head}{opening}{nodes_in_words(names)}{closing}"
    if len(inline) <= WIDTH:
        return [inline]
    pad = " " * (len(head) - len(head.lstrip()) + 4)
    more = [f"{pad}and {len(names) - 3:,} more"] if len(names) > 3 else []
    after = "" if closing.strip() in ("", ")") else " " + closing.strip()
    return [f"{head}{after}:", *(pad + name for name in names[:3]), *more]


def _class_head(cls: Any) -> list[str]:
    """A changed class's head: its key and summary, how many nodes and which change, on one
    line where it fits ``WIDTH``, else the nodes on the lines below the summary."""
    nodes = counted(len(cls.nodes), "node")
    line = f"class {cls.key}: {cls.summary} ({nodes}; changes on {nodes_in_words(cls.changed)})"
    if len(line) <= WIDTH:
        return [line]
    return [
        f"class {cls.key}: {cls.summary}",
        *named_lines(f"  {nodes}; changes on", cls.changed, " ", ""),
    ]


def nodes_in_words(names: list[str], shown: int = 3) -> str:
    """``a``, ``a, b and c``, ``a, b, c and 5 more``: the nodes a change reaches (all of them
    in ``--json``)."""
    if len(names) <= shown:
        return ", ".join(names[:-1]) + (" and " if len(names) > 1 else "") + names[-1]
    return f"{', '.join(names[:shown])} and {len(names) - shown:,} more"


def _change(change: Any) -> str:
    where = f"{change.kind} {change.name}".strip()
    return f"{where}: {change.old} -> {change.new}"
