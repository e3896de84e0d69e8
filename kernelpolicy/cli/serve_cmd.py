"""``kernelpolicy serve`` and ``kernelpolicy status``."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from kernelpolicy.cli.common import add_platform_option, environment, obtain_platform
from kernelpolicy.errors import KernelPolicyError


def register(commands: Any) -> None:
    serve = commands.add_parser(
        "serve",
        help="run the daemon: gRPC (kernelpolicy.v1, flagd v1/v2, health, reflection)",
        description=(
            "Probe this machine (or --platform FILE), resolve the policies, print the explain "
            "table, and serve the answers over gRPC until SIGTERM/SIGINT. Policy files are "
            "watched (Kubernetes ConfigMap swaps included) and reloaded; SIGHUP reloads too; a "
            "bad file keeps the last good set and shows in Explain and 'kernelpolicy status'. "
            "No RPC changes policy."
        ),
        epilog=(
            "examples:\n"
            "  kernelpolicy serve\n"
            "  kernelpolicy serve --listen 127.0.0.1:0 --port-file /tmp/kp.port\n"
            "  kernelpolicy serve --policies /etc/kernelpolicy --listen 0.0.0.0:50151  "
            "(with KERNELPOLICY_TLS_CERT_FILE/KEY_FILE)"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument(
        "--listen", action="append", metavar="ADDR",
        help="host:port or unix:/path (repeatable; default 127.0.0.1:50151 and a unix socket)",
    )  # fmt: skip
    serve.add_argument(
        "--policies", action="append", type=Path, metavar="PATH", help="policy file or directory"
    )
    add_platform_option(serve)
    serve.add_argument(
        "--env", metavar="K=V", action="append", default=[], help="set a variable for the answers"
    )
    serve.add_argument("--port-file", type=Path, help="write the bound addresses here, one a line")
    serve.add_argument(
        "--no-watch", action="store_true", help="do not watch policy files (SIGHUP still reloads)"
    )
    serve.add_argument("--quiet", action="store_true", help="do not print the explain table")
    serve.set_defaults(run=run_serve)

    status = commands.add_parser(
        "status",
        help="ask a running daemon how it is: health, revision, policies, last reload error",
        description=(
            "Query a running daemon; exits 1 when it is not serving or its last reload failed."
        ),
    )
    status.add_argument(
        "--address", default=None, help="default: the unix socket, then 127.0.0.1:50151"
    )
    status.add_argument("--json", action="store_true")
    status.set_defaults(run=run_status)


def run_serve(args: argparse.Namespace) -> int:
    from kernelpolicy.cli.render import explain_table
    from kernelpolicy.server.daemon import DEFAULT_PORT, Daemon, TlsFiles, default_unix_socket
    from kernelpolicy.server.state import ServingState
    from kernelpolicy.settings import settings_from

    base_env = environment(args, None)
    settings = settings_from(base_env)
    platform = obtain_platform(args)
    env = environment(args, platform)
    state = ServingState(
        platform, env, args.policies or list(settings.policy_paths), settings.overrides,
        settings.cache_dir, allow_untrusted=settings.allow_untrusted_files,
    )  # fmt: skip
    tls = None
    if settings.tls_cert_file or settings.tls_key_file:
        if not (settings.tls_cert_file and settings.tls_key_file):
            raise KernelPolicyError(
                "TLS needs both KERNELPOLICY_TLS_CERT_FILE and KERNELPOLICY_TLS_KEY_FILE"
            )
        tls = TlsFiles(settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file)
    listen = args.listen or [f"127.0.0.1:{DEFAULT_PORT}", default_unix_socket()]
    if not args.quiet:
        print(explain_table(state.snapshot.resolution), flush=True)
        print(flush=True)
    daemon = Daemon(state, listen, tls=tls, log_format=settings.log_format, watch=not args.no_watch)

    def started() -> None:
        if args.port_file:
            args.port_file.write_text("\n".join(daemon.bound) + "\n")
        print(f"serving on {', '.join(daemon.bound)}", file=sys.stderr, flush=True)

    asyncio.run(daemon.serve(on_started=started))
    return 0


def run_status(args: argparse.Namespace) -> int:
    import json

    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from kernelpolicy.server._generated.kernelpolicy.v1 import kernelpolicy_pb2 as pb
    from kernelpolicy.server.client import connect
    from kernelpolicy.server.daemon import DEFAULT_PORT, default_unix_socket

    addresses = (
        [args.address] if args.address else [default_unix_socket(), f"127.0.0.1:{DEFAULT_PORT}"]
    )
    last_error = ""
    for address in addresses:
        with connect(address, timeout=3.0) as client:
            try:
                health = health_pb2_grpc.HealthStub(client.channel).Check(
                    health_pb2.HealthCheckRequest(service=""), timeout=3.0
                )
                explain = client.stub.Explain(pb.ExplainRequest(), timeout=3.0)
            except grpc.RpcError as exc:
                last_error = f"{address}: {exc.code().name}: {exc.details()}"
                continue
        serving = health.status == health_pb2.HealthCheckResponse.SERVING
        document = json.loads(explain.json)
        report = {
            "address": address,
            "serving": serving,
            "revision": explain.revision,
            "fingerprint": document["fingerprint"],
            "policy_files": list(explain.policy_files),
            "policy_error": explain.policy_error or None,
            "errors": {f: d["error"] for f, d in document["decisions"].items() if d["error"]},
        }
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            health_word = "SERVING" if serving else "NOT SERVING"
            print(
                f"{address}: {health_word}, revision {explain.revision}, "
                f"fingerprint {report['fingerprint']}"
            )
            print(f"policies: {', '.join(report['policy_files'])}")
            if explain.policy_error:
                print(
                    f"last reload FAILED (serving the last good policies):\n{explain.policy_error}"
                )
            for feature, error in report["errors"].items():
                print(f"decision error: {feature}: {error}")
        return 0 if serving and not explain.policy_error else 1
    raise KernelPolicyError(f"no daemon answered ({last_error or 'nothing tried'})")
