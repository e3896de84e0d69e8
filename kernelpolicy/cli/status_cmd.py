"""``kernelpolicy status``: how a running daemon is, what it halted, and ``--clear-halt``."""

from __future__ import annotations

import argparse
from typing import Any

from kernelpolicy.cli.common import HelpFormatter, add_tls_client_options, tls_credentials
from kernelpolicy.cli.exits import add_model_kind_option
from kernelpolicy.encoding import one_line, some_lines
from kernelpolicy.errors import KernelPolicyError
from kernelpolicy.limits import SHOWN_STATUS_CHARS

CLEAR_TIMEOUT = 10.0
"""Seconds ``--clear-halt`` waits for the daemon to answer (it answers once it resolved again)."""
SHOWN_POLICY_FILES = 100
"""How many of the daemon's policy files the text report names."""
SHOWN_FEATURES = 100
"""How many of the daemon's features an unknown --clear-halt feature's error names."""


def register(commands: Any) -> None:
    status = commands.add_parser(
        "status",
        help="ask a running daemon how it is: health, revision, policy digest, policies, last "
        "reload error, halted kernels",
        description=(
            "Query a running daemon. A daemon behind a unix socket must run as root or as you "
            "(its peer credentials are checked); TCP addresses carry no such identity (a TCP "
            "daemon with TLS is asked with --tls-ca, and --tls-cert/--tls-key where it requires "
            "client certificates). "
            "--clear-halt lifts the halts of a feature on this node (a candidate halted by its "
            "policy's halt_on after guard trips or run-time failures its workers reported): "
            "only over the unix socket, as root or the daemon's user."
        ),
        epilog=(
            "exit status: 0 serving, the last reload succeeded and no decision counted is an "
            "error (--clear-halt: the daemon answered); 1 not serving, the last reload failed "
            "(the last good policies keep serving), or a decision is an error for every model "
            "or for --model-kind (default mha), as explain --address counts them (each named "
            "on stderr); 2 no daemon answered, a daemon was refused (run by another user), an "
            "unknown feature, or bad usage\n\n"
            "examples:\n"
            "  kernelpolicy status\n"
            "  kernelpolicy status --json\n"
            "  kernelpolicy status --address unix:/run/kernelpolicy/kernelpolicy.sock\n"
            "  kernelpolicy status --clear-halt sampler.greedy"
        ),
        formatter_class=HelpFormatter,
        allow_abbrev=False,
    )
    status.add_argument(
        "--address",
        default=None,
        help="unix:/path or host:port (default: your unix socket, then root's "
        "/run/kernelpolicy/kernelpolicy.sock)",
    )
    status.add_argument(
        "--json",
        action="store_true",
        help="a JSON object on stdout (with 'error' when none answered)",
    )
    status.add_argument(
        "--clear-halt", metavar="FEATURE",
        help="lift every halt of FEATURE on this node and count its events from zero",
    )  # fmt: skip
    add_tls_client_options(status)
    add_model_kind_option(status)
    status.set_defaults(run=run_status)


def quiet_grpc() -> None:
    """gRPC's C core logs its own lines (``E1122 ... add_port.cc``) before a bind error that we
    report in one line ourselves; it reads this before grpc is imported."""
    import os

    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")


def _status_addresses(args: argparse.Namespace) -> list[str]:
    import os

    from kernelpolicy.server.sockets import (
        SOCKET_NAME,
        default_socket_address,
        node_socket_address,
        runtime_dir,
    )

    if args.address is not None:  # an empty one is a mistake, not "the default"
        from kernelpolicy.server.addresses import check_address

        return [check_address(args.address, "--address")]
    configured = node_socket_address(os.environ)
    if configured != default_socket_address():  # KERNELPOLICY_SOCKET: that one only
        return [configured]
    addresses = [configured]
    if os.geteuid() != 0:
        addresses.append(f"unix:{runtime_dir(0) / SOCKET_NAME}")
    return addresses


def _ask(address: str, credentials: Any = None) -> tuple[bool, Any]:
    """Whether the daemon at ``address`` is serving, and its Explain answer (read by
    :func:`_report`).

    Raises:
        DaemonError: It is refused (peer check), not answering, or a request failed.
    """
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from kernelpolicy.errors import DaemonError
    from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb
    from kernelpolicy.server.client import connect, failure_details

    with connect(address, timeout=3.0, credentials=credentials) as client:
        client.wait_ready()
        try:
            health = health_pb2_grpc.HealthStub(client.channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=3.0
            )
            explain = client.stub.Explain(pb.ExplainRequest(), timeout=3.0)
        except grpc.RpcError as exc:
            raise DaemonError(f"{address}: {exc.code().name}: {failure_details(exc)}") from None
    return health.status == health_pb2.HealthCheckResponse.SERVING, explain


def _report(address: str, serving: bool, explain: Any) -> dict[str, Any]:
    """The status report of the daemon at ``address`` from its answers, strings as it sent
    them (:func:`_print_report` escapes them).

    Raises:
        DaemonError: Its Explain document is not strict JSON, or not the shape
            ``kernelpolicy explain --json`` writes.
    """
    from kernelpolicy.errors import DaemonError
    from kernelpolicy.safeio import parse_json

    def refused(what: str, problem: str) -> DaemonError:
        return DaemonError(
            f"the daemon at {address} answered an Explain document that is not {what}: "
            f"{one_line(problem)}"
        )

    document = parse_json(explain.json, "ExplainResponse.json", lambda m: refused("strict JSON", m))
    try:
        fingerprint = _member(document, "fingerprint", str, "")
        # A daemon of before the policy digest sends none: said as unknown, not refused.
        digest = _member(document, "policy_digest", str, "", nullable=True, optional=True)
        decisions = _member(document, "decisions", dict, "")
        errors, halted = _errors_and_halts(decisions)
    except _Shape as exc:
        raise refused("what `kernelpolicy explain --json` writes", str(exc)) from None
    return {
        "address": address,
        "serving": serving,
        "revision": explain.revision,
        "policy_digest": digest,
        "fingerprint": fingerprint,
        "policy_files": list(explain.policy_files),
        "policy_error": explain.policy_error or None,
        "errors": errors,
        "halted": halted,
    }


class _Shape(Exception):
    """A part of an Explain document that is not what ``explain --json`` writes: where, what."""


_KINDS: dict[type, str] = {dict: "an object", list: "an array", str: "a string"}


def _member(
    value: Any, key: str, kind: type, where: str, *, nullable: bool = False, optional: bool = False
) -> Any:
    """``value[key]``, which must be of ``kind`` (or null where ``nullable``), ``value`` being
    a JSON object at ``where``; ``optional``: None where it is missing."""
    if not isinstance(value, dict):
        raise _Shape(f"{where or '(top level)'}: expected an object, got {_kind(value)}")
    path = f"{where}.{key}" if where else key
    if key not in value:
        if optional:
            return None
        raise _Shape(f"{path}: missing")
    member = value[key]
    if not isinstance(member, kind) and not (nullable and member is None):
        raise _Shape(f"{path}: expected {_KINDS[kind]}, got {_kind(member)}")
    return member


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return _KINDS.get(type(value), "a number")


def _errors_and_halts(
    decisions: dict[str, Any],
) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """Feature -> error, and feature -> impl -> why for the candidates halted on the node.

    Raises:
        _Shape: A decision, candidate or failure is not the shape ``explain --json`` writes.
    """
    errors: dict[str, str] = {}
    halted: dict[str, dict[str, str]] = {}
    for feature, decision in decisions.items():
        where = f"decisions[{feature!r}]"
        if error := _member(decision, "error", str, where, nullable=True):
            errors[feature] = error
        for i, candidate in enumerate(_member(decision, "candidates", list, where)):
            at = f"{where}.candidates[{i}]"
            impl = _member(candidate, "impl", str, at)
            for j, failure in enumerate(_member(candidate, "failures", list, at)):
                if _member(failure, "kind", str, f"{at}.failures[{j}]") == "halted":
                    why = _member(failure, "message", str, f"{at}.failures[{j}]")
                    halted.setdefault(feature, {})[impl] = why
    return errors, halted


def _print_report(report: dict[str, Any]) -> None:
    """The report as text: every string the daemon sent is cut and escaped (an escape sequence
    in it would otherwise move the cursor or clear the user's terminal)."""
    health_word = "SERVING" if report["serving"] else "NOT SERVING"
    digest = report["policy_digest"]
    print(
        f"{report['address']}: {health_word}, revision {report['revision']}, "
        f"fingerprint {one_line(report['fingerprint'], SHOWN_STATUS_CHARS)}, "
        f"policy digest {'unknown' if digest is None else one_line(digest, SHOWN_STATUS_CHARS)}"
    )
    files = report["policy_files"]
    listed = [one_line(name, SHOWN_STATUS_CHARS) for name in files[:SHOWN_POLICY_FILES]]
    if len(files) > SHOWN_POLICY_FILES:
        listed.append(f"...(and {len(files) - SHOWN_POLICY_FILES} more)")
    print(f"policies: {', '.join(listed)}")
    if report["policy_error"]:
        error = some_lines(report["policy_error"], limit=SHOWN_STATUS_CHARS)
        print(f"last reload FAILED (serving the last good policies):\n{error}")
    for feature, error in report["errors"].items():
        shown_error = one_line(error, SHOWN_STATUS_CHARS)
        print(f"decision error: {one_line(feature, SHOWN_STATUS_CHARS)}: {shown_error}")
    for feature, impls in report["halted"].items():
        name = one_line(feature, SHOWN_STATUS_CHARS)
        for impl, why in impls.items():
            print(
                f"HALTED: {name}/{one_line(impl, SHOWN_STATUS_CHARS)}: "
                f"{one_line(why, SHOWN_STATUS_CHARS)} (kernelpolicy status --clear-halt {name})"
            )


def run_status(args: argparse.Namespace) -> int:
    import json

    from kernelpolicy.errors import DaemonError

    quiet_grpc()
    addresses = _status_addresses(args)
    if args.clear_halt is not None and not addresses[0].startswith("unix:"):
        raise DaemonError(  # a usage mistake, not a daemon that did not answer
            f"--clear-halt with --address {addresses[0]}: it goes over the daemon's unix socket "
            "only (its peer credentials say who asks); give --address unix:/path"
        )
    credentials = tls_credentials(args, addresses)
    problems: list[str] = []
    for address in addresses:
        try:
            if args.clear_halt is not None:
                return _clear(address, args.clear_halt, args.json)
            serving, explain = _ask(address, credentials)
        except DaemonError as exc:
            problems.append(str(exc))
            if str(exc).startswith("refusing") or args.address:
                break  # another user's daemon, or the one asked for: do not look further
            continue
        try:  # a daemon answered: what is wrong with its answer is said as that, not looked past
            report = _report(address, serving, explain)
        except DaemonError as exc:
            if not args.json:
                raise
            print(json.dumps({"serving": False, "error": str(exc)}, indent=2))
            return 2
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            _print_report(report)
        failed = _counted_errors(address, credentials, args.model_kind) if report["errors"] else 0
        return max(failed, 0 if report["serving"] and not report["policy_error"] else 1)
    message = f"no daemon answered ({'; '.join(problems) or 'nothing tried'})"
    if problems and all("no such socket" in problem for problem in problems):
        message += (
            "; none is running there: start one with 'kernelpolicy serve'"
            if args.address  # named already: no "name one with --address"
            else "; none is running here: start one with 'kernelpolicy serve', or name one "
            "with --address"
        )
    if args.json:
        print(json.dumps({"serving": False, "error": message}, indent=2))
        return 2
    raise KernelPolicyError(message)


def _counted_errors(address: str, credentials: Any, model_kind: str) -> int:
    """1 where a decision of the daemon at ``address`` is an error for every model or for
    ``model_kind``, said on stderr as ``explain --address`` says it (its answer rebuilt here,
    for the kind of model each feature matters to), else 0. A daemon that answered Explain but
    not this is counted as failing: its errors are there."""
    import sys

    from kernelpolicy.cli.exits import report_exit
    from kernelpolicy.errors import DaemonError
    from kernelpolicy.server.client import connect

    try:
        with connect(address, timeout=10.0, credentials=credentials) as client:
            resolution = client.resolve()
    except DaemonError as exc:
        print(f"kernelpolicy: exit 1: {one_line(address)}: its decision errors could not be "
              f"told apart by model kind: {one_line(str(exc))}", file=sys.stderr)  # fmt: skip
        return 1
    return report_exit(resolution.policies, resolution.decisions.items(), model_kind)


def _clear(address: str, feature: str, as_json: bool) -> int:
    """Ask the daemon at ``address`` to lift ``feature``'s halts; print what it lifted.

    Raises:
        DaemonError: Not a unix socket, refused (peer check), not answering, or an answer that
            is neither an error nor the list of what it lifted.
    """
    import json

    from kernelpolicy.errors import DaemonError
    from kernelpolicy.server.reporter import request_clear

    answer = request_clear(address, feature, CLEAR_TIMEOUT)
    error, cleared = answer.get("error"), answer.get("cleared")
    if not isinstance(error, str) and not (
        isinstance(cleared, list) and all(isinstance(impl, str) for impl in cleared)
    ):
        raise DaemonError(
            f"{address}: --clear-halt {feature}: the daemon answered neither an error nor the "
            f"list of what it lifted: {one_line(json.dumps(answer), 200)}"
        )
    if isinstance(error, str):
        answer["error"] = error = error + _unknown_feature_hint(address, feature)
    if as_json:
        print(json.dumps({"address": address, "feature": feature, **answer}, indent=2))
    if isinstance(error, str):
        if not as_json:
            raise KernelPolicyError(f"{address}: --clear-halt {feature}: {one_line(error)}")
        return 2
    if not as_json:
        lifted = ", ".join(
            f"{feature}/{one_line(impl, SHOWN_STATUS_CHARS)}" for impl in cleared or ()
        )
        print(f"{address}: cleared {lifted}" if lifted else f"{address}: {feature}: not halted")
    return 0


def _unknown_feature_hint(address: str, feature: str) -> str:
    """Where the daemon's policies define no ``feature``: the close names and the features it
    has (``; did you mean 'sampler.greedy'?; the daemon's policies define: ...``), as explain
    says of an unknown feature; else (or where the daemon does not list them) nothing."""
    import grpc

    from kernelpolicy.errors import DaemonError
    from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb
    from kernelpolicy.server.client import connect
    from kernelpolicy.suggest import did_you_mean

    try:
        with connect(address, timeout=CLEAR_TIMEOUT) as client:
            client.wait_ready()
            listed = client.stub.ListFeatures(pb.ListFeaturesRequest(), timeout=CLEAR_TIMEOUT)
    except (DaemonError, grpc.RpcError):
        return ""
    names = [one_line(f.name, SHOWN_STATUS_CHARS) for f in listed.features if not f.gate]
    if feature in names:
        return ""
    shown = names[:SHOWN_FEATURES]
    if len(names) > SHOWN_FEATURES:
        shown.append(f"...(and {len(names) - SHOWN_FEATURES} more)")
    return f"{did_you_mean(feature, names)}; the daemon's policies define: {', '.join(shown)}"
