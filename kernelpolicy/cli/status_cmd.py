"""``kernelpolicy status``: how a running daemon is, what it halted, and ``--clear-halt``."""

from __future__ import annotations

import argparse
from typing import Any

from kernelpolicy.cli.common import HelpFormatter, add_tls_client_options, tls_credentials
from kernelpolicy.errors import KernelPolicyError

CLEAR_TIMEOUT = 10.0
"""Seconds ``--clear-halt`` waits for the daemon to answer (it answers once it resolved again)."""


def register(commands: Any) -> None:
    status = commands.add_parser(
        "status",
        help="ask a running daemon how it is: health, revision, policies, last reload error, "
        "halted kernels",
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
            "exit status: 0 serving and the last reload succeeded (--clear-halt: the daemon "
            "answered); 1 not serving, or the last reload failed (the last good policies keep "
            "serving); 2 no daemon answered, a daemon was refused (run by another user), an "
            "unknown feature, or bad usage"
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


def _ask(address: str, credentials: Any = None) -> dict[str, Any]:
    """The status report of the daemon at ``address``.

    Raises:
        DaemonError: It is refused (peer check), not answering, or a request failed.
    """
    import json

    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from kernelpolicy.errors import DaemonError
    from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb
    from kernelpolicy.server.client import connect

    with connect(address, timeout=3.0, credentials=credentials) as client:
        client.wait_ready()
        try:
            health = health_pb2_grpc.HealthStub(client.channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=3.0
            )
            explain = client.stub.Explain(pb.ExplainRequest(), timeout=3.0)
        except grpc.RpcError as exc:
            raise DaemonError(f"{address}: {exc.code().name}: {exc.details()}") from None
    document = json.loads(explain.json)
    return {
        "address": address,
        "serving": health.status == health_pb2.HealthCheckResponse.SERVING,
        "revision": explain.revision,
        "fingerprint": document["fingerprint"],
        "policy_files": list(explain.policy_files),
        "policy_error": explain.policy_error or None,
        "errors": {f: d["error"] for f, d in document["decisions"].items() if d["error"]},
        "halted": _halted(document),
    }


def _halted(document: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Feature -> impl -> why, for the candidates halted on the node."""
    halted: dict[str, dict[str, str]] = {}
    for feature, decision in document["decisions"].items():
        for candidate in decision["candidates"]:
            for failure in candidate["failures"]:
                if failure["kind"] == "halted":
                    halted.setdefault(feature, {})[candidate["impl"]] = failure["message"]
    return halted


def _print_report(report: dict[str, Any]) -> None:
    health_word = "SERVING" if report["serving"] else "NOT SERVING"
    print(
        f"{report['address']}: {health_word}, revision {report['revision']}, "
        f"fingerprint {report['fingerprint']}"
    )
    print(f"policies: {', '.join(report['policy_files'])}")
    if report["policy_error"]:
        print(f"last reload FAILED (serving the last good policies):\n{report['policy_error']}")
    for feature, error in report["errors"].items():
        print(f"decision error: {feature}: {error}")
    for feature, impls in report["halted"].items():
        for impl, why in impls.items():
            print(f"HALTED: {feature}/{impl}: {why} (kernelpolicy status --clear-halt {feature})")


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
            report = _ask(address, credentials)
        except DaemonError as exc:
            problems.append(str(exc))
            if str(exc).startswith("refusing") or args.address:
                break  # another user's daemon, or the one asked for: do not look further
            continue
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            _print_report(report)
        return 0 if report["serving"] and not report["policy_error"] else 1
    message = f"no daemon answered ({'; '.join(problems) or 'nothing tried'})"
    if args.json:
        print(json.dumps({"serving": False, "error": message}, indent=2))
        return 2
    raise KernelPolicyError(message)


def _clear(address: str, feature: str, as_json: bool) -> int:
    """Ask the daemon at ``address`` to lift ``feature``'s halts; print what it lifted.

    Raises:
        DaemonError: Not a unix socket, refused (peer check), or not answering.
    """
    import json

    from kernelpolicy.server.reporter import request_clear

    answer = request_clear(address, feature, CLEAR_TIMEOUT)
    if as_json:
        print(json.dumps({"address": address, "feature": feature, **answer}, indent=2))
    if "error" in answer:
        if not as_json:
            raise KernelPolicyError(f"{address}: --clear-halt {feature}: {answer['error']}")
        return 2
    if not as_json:
        lifted = ", ".join(f"{feature}/{impl}" for impl in answer["cleared"])
        print(f"{address}: cleared {lifted}" if lifted else f"{address}: {feature}: not halted")
    return 0
