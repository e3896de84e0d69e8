"""``kernelpolicy serve`` (``kernelpolicy status`` lives in :mod:`.status_cmd`)."""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelpolicy.cli import status_cmd
from kernelpolicy.cli.common import (
    HelpFormatter,
    add_platform_option,
    add_policies_option,
    environment,
    local_policies,
    local_settings,
    obtain_platform,
)
from kernelpolicy.cli.port_file import check_port_file, remove_port_file, write_port_file
from kernelpolicy.cli.status_cmd import quiet_grpc as _quiet_grpc
from kernelpolicy.cli.warm_cmd import add_build_options
from kernelpolicy.warming import DEFAULT_DEVICE, DEFAULT_VOCABS

if TYPE_CHECKING:
    from kernelpolicy.server.fleet import WarmStart
    from kernelpolicy.server.state import ServingState
    from kernelpolicy.settings import Settings
    from kernelpolicy.warming import Warming


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
            "  kernelpolicy serve --listen 127.0.0.1:0 --port-file $XDG_RUNTIME_DIR/kp.port\n"
            "  kernelpolicy serve --http 9090 --warm --warm-vocab 128256\n"
            "  KERNELPOLICY_TLS_CERT_FILE=cert.pem KERNELPOLICY_TLS_KEY_FILE=key.pem \\\n"
            "      kernelpolicy serve --policies /etc/kernelpolicy --listen 0.0.0.0:50151"
        ),
        formatter_class=HelpFormatter,
    )
    _add_serving_options(serve)
    _add_publishing_options(serve)
    _add_warm_options(serve)
    serve.set_defaults(run=run_serve)

    status_cmd.register(commands)


def _add_serving_options(serve: argparse.ArgumentParser) -> None:
    """What the daemon serves, where, and how much it says: addresses, policies, platform."""
    serve.add_argument(
        "--listen", action="append", metavar="ADDR",
        help="host:port or unix:/path (repeatable; default 127.0.0.1:50151 and the unix socket "
        "in a private directory: $XDG_RUNTIME_DIR/kernelpolicy/, /run/kernelpolicy/ for root)",
    )  # fmt: skip
    add_policies_option(serve)
    add_platform_option(serve)
    serve.add_argument(
        "--env", metavar="K=V", action="append", default=[],
        help="set an environment variable for the answers (repeatable; K= unsets it)",
    )  # fmt: skip
    serve.add_argument(
        "--port-file", type=Path, metavar="PATH",
        help="once listening, write the bound addresses here, one a line (replaced whole, "
        "removed when the daemon stops); its directory must be one only you or root can write: "
        "root's sticky /tmp passes, but a private one such as $XDG_RUNTIME_DIR is better (in "
        "/tmp another user can put a stale file at the path once the daemon has removed its "
        "own)",
    )  # fmt: skip
    serve.add_argument(
        "--no-watch", action="store_true", help="do not watch policy files (SIGHUP still reloads)"
    )
    serve.add_argument(
        "--quiet",
        action="store_true",
        help="print only warnings and errors: no explain table, no start, reload or stop lines",
    )


def _add_publishing_options(serve: argparse.ArgumentParser) -> None:
    """What the daemon publishes besides gRPC: HTTP (OFREP, metrics, probes) and node labels."""
    serve.add_argument(
        "--http", metavar="ADDR",
        help="also serve HTTP on PORT or HOST:PORT (a bare port is 127.0.0.1): OFREP "
        "/ofrep/v1/evaluate/flags[/KEY], /metrics, /healthz, /readyz; TLS as for gRPC",
    )  # fmt: skip
    serve.add_argument(
        "--labels-dir", type=Path, metavar="DIR",
        help="write node labels for Node Feature Discovery to DIR/kernelpolicy (its features.d), "
        "rewritten on every policy revision",
    )  # fmt: skip
    serve.add_argument(
        "--ready-requires-current-policy", action="store_true",
        help="with --http: /readyz answers 503 while the last policy reload failed (the daemon "
        "still serves the last good policies); default: ready whenever it serves",
    )  # fmt: skip


def _add_warm_options(serve: argparse.ArgumentParser) -> None:
    """``--warm`` and the options that go with it (``kernelpolicy warm``'s work at start)."""
    serve.add_argument(
        "--warm", action="store_true",
        help="at start, build the kernels the decisions can route to into the node's kernel "
        "cache, as 'kernelpolicy warm' does; /readyz answers 503 until they are built (the "
        "answers are served meanwhile)",
    )  # fmt: skip
    add_build_options(serve, prefix="warm-")


def run_serve(args: argparse.Namespace) -> int:
    from kernelpolicy.server.signals import hold_sighup, release_sighup

    hold_sighup()  # first: a SIGHUP while starting is a reload later, not the end
    try:
        return _serve(args)
    finally:
        release_sighup()


def _serve(args: argparse.Namespace) -> int:
    from kernelpolicy.server.signals import take_pending

    _quiet_grpc()
    from kernelpolicy.render import explain_table
    from kernelpolicy.server.addresses import check_address
    from kernelpolicy.server.daemon import Daemon, default_unix_socket
    from kernelpolicy.server.tls import tls_from_settings

    settings = local_settings(args)  # settings mistakes first
    listen = args.listen or default_listen(settings)
    for address in listen:  # before anything slow
        check_address(address, "--listen", listening=True)
    _check_options(args)
    tls = tls_from_settings(settings)
    raise_descriptor_limit()  # before the listeners take their shares of it
    state = _serving_state(args, settings)
    daemon = Daemon(
        state, listen, tls=tls, log_format=settings.log_format, watch=not args.no_watch,
        default_socket=default_unix_socket(), quiet=args.quiet, http=args.http,
        labels_dir=args.labels_dir,
        ready_requires_current_policy=args.ready_requires_current_policy,
        warm=_warm_start(args, settings),
    )  # fmt: skip

    started = _Started(args, daemon, lambda: explain_table(state.snapshot.resolution))

    import asyncio  # here, not at the top: every other command would pay ~20 ms for it

    try:
        asyncio.run(daemon.serve(on_started=started, pending_reload=take_pending))
    finally:
        started.finish()
    if started.failed:
        raise started.failed[0]
    return 0


PUBLISH_WAIT_SECONDS = 5.0
"""How long a stopping daemon waits for its start-up output (the port file, the explain table)
to be written."""


class _Started:
    """Once every address is bound (an address in use is exit 2 with nothing on stdout): the
    port file, then the explain table and start line, in a thread beside the event loop (a slow
    disk or a full pipe never stops the answers); a failure stops the daemon as SIGTERM does."""

    def __init__(self, args: argparse.Namespace, daemon: Any, table: Callable[[], str]) -> None:
        self.args, self.daemon, self.table = args, daemon, table
        self.failed: list[Exception] = []
        self.written: list[tuple[int, int]] = []  # the port file's device and inode
        self.threads: list[threading.Thread] = []

    def __call__(self) -> None:
        daemon = self.daemon
        addresses = [*daemon.bound, *([daemon.fleet.url] if daemon.fleet.url else [])]
        thread = threading.Thread(
            target=self._publish, args=(addresses,), name="kp-started", daemon=True
        )  # a stdout no one reads must not hold the daemon's exit
        self.threads.append(thread)
        thread.start()

    def _publish(self, addresses: list[str]) -> None:
        log_format, quiet = self.daemon.log_format, self.args.quiet
        try:
            if self.args.port_file:
                self.written.append(write_port_file(self.args.port_file, addresses))
            if not quiet:
                print(self.table(), flush=True)
                print(flush=True)
            say_decision_errors(self.daemon.state.snapshot.resolution, log_format, quiet=quiet)
            if not quiet:
                say_serving(addresses, log_format)
        except Exception as exc:  # the daemon listens already: it stops as on SIGTERM
            self.failed.append(exc)  # (its sockets and halts files removed), then this is said
            self.daemon.stop()

    def finish(self) -> None:
        """The daemon stopped: wait for the thread (at most :data:`PUBLISH_WAIT_SECONDS`: one
        blocked on a full stdout pipe no one reads is left to the exit), then remove the port
        file it wrote if that is still there (same device and inode: not whatever took its name
        since)."""
        for thread in self.threads:
            thread.join(PUBLISH_WAIT_SECONDS)
        for stamp in self.written:
            remove_port_file(self.args.port_file, stamp)


def say_serving(addresses: list[str], log_format: str) -> None:
    """``serving on ADDR, ...`` on stderr; with JSON logs the event ``kernelpolicy.serve.serving``
    (``addresses``) instead, so that every line there is JSON for a log pipeline."""
    if log_format == "json":
        from kernelpolicy.logs import get_logger

        get_logger(log_format).info("kernelpolicy.serve.serving", addresses=addresses)
    else:
        print(f"serving on {', '.join(addresses)}", file=sys.stderr, flush=True)


DECISION_ERROR_EVENT = "kernelpolicy.serve.decision_error"
"""The event, at start, of a decision that is an error (explain's table shows it as ERROR)."""


def say_decision_errors(resolution: Any, log_format: str, *, quiet: bool = False) -> None:
    """Each decision of ``resolution`` that is an error, on stderr: an error event for those
    explain counts by default (every model's, an mha model's), an info event (none with
    ``quiet``) for those of another kind of model only; plain ``kernelpolicy: error:`` lines
    where the log is off. The explain table shows them too, but not with ``--quiet``, and a
    daemon serving an error is no daemon to start quietly."""
    from kernelpolicy.cli.exits import counted, scope_of
    from kernelpolicy.logs import get_logger

    policies = resolution.policies
    for feature, decision in resolution.decisions.items():
        if decision.error is None:
            continue
        code = decision.error_code.value if decision.error_code else "error"
        scope = scope_of(policies, feature)
        if counted(policies, feature, "mha"):
            if log_format == "off":
                print(f"kernelpolicy: error: {feature}: {decision.error} ({code})",
                      file=sys.stderr, flush=True)  # fmt: skip
            else:
                get_logger(log_format).error(
                    DECISION_ERROR_EVENT, feature=feature, error_code=code, error=decision.error
                )
        elif not quiet and log_format != "off":
            get_logger(log_format).info(
                DECISION_ERROR_EVENT, feature=feature, error_code=code, error=decision.error,
                model_kind=scope,
            )  # fmt: skip


def _warm_start(args: argparse.Namespace, settings: Settings) -> WarmStart | None:
    """``--warm``: what the daemon builds once it has resolved (``kernelpolicy warm``'s work)."""
    if not args.warm:
        return None

    def start(resolution: Any) -> Warming | str:
        from kernelpolicy.errors import KernelPolicyError
        from kernelpolicy.kernel_cache import prepare_kernel_cache
        from kernelpolicy.settings import default_cache_dir
        from kernelpolicy.warming import has_device, node_warming

        device = args.warm_device
        if not has_device(device):  # before the cache: without a GPU nothing is made
            return f"no device {device} here: nothing to build"
        try:
            root = prepare_kernel_cache(settings.cache_dir or default_cache_dir())
        except KernelPolicyError as exc:
            return f"kernel cache not used, nothing built: {exc}"
        vocabs = args.warm_vocab or list(DEFAULT_VOCABS)
        return node_warming(resolution, root, vocabs=vocabs, device=device, jobs=args.warm_jobs)

    return start


def _serving_state(args: argparse.Namespace, settings: Settings) -> ServingState:
    """Probe what the policies read (their libraries and variables), as explain and resolve()
    do, so that the daemon answers what they answer on this node; then resolve.

    Raises:
        SettingsError: A force or override names nothing the policies define, or a policy path
            does not exist (naming the option or variable it came from).
    """
    from kernelpolicy.inputs import gather
    from kernelpolicy.server.state import ServingState

    paths = args.policies or list(settings.policy_paths)  # as given: each reload reads them
    # A mistyped KERNELPOLICY_FORCE_* or override would otherwise be ignored in silence while the
    # operator believes a kernel is forced: gather refuses it, as explain and resolve() do.
    inputs = gather(
        local_policies(args, settings),  # a missing path: one line naming where it came from
        settings,
        env=lambda platform: environment(args, platform),
        platform=lambda libraries, patterns: obtain_platform(
            args, libraries=libraries, env_patterns=patterns
        ),
        overrides=settings.overrides,
        evidence=False,
    )
    state = ServingState(
        inputs.platform, inputs.env, paths, settings.overrides,
        settings.cache_dir, allow_untrusted=settings.allow_untrusted_files,
    )  # fmt: skip
    return state


def _check_options(args: argparse.Namespace) -> None:
    """The options checked before anything is probed, resolved or printed.

    Raises:
        DaemonError: ``--http`` is no address, ``--labels-dir`` no directory,
            ``--ready-requires-current-policy`` without ``--http``, or ``--port-file``
            cannot be written.
    """
    from kernelpolicy.errors import DaemonError

    if args.http is not None:
        from kernelpolicy.server.http import parse_http_address

        parse_http_address(args.http)
    if args.labels_dir is not None and not args.labels_dir.is_dir():
        raise DaemonError(
            f"--labels-dir {args.labels_dir}: not a directory; expected Node Feature "
            "Discovery's features.d (/etc/kubernetes/node-feature-discovery/features.d)"
        )
    if args.ready_requires_current_policy and args.http is None:
        raise DaemonError(
            "--ready-requires-current-policy: it changes /readyz, which only --http serves; "
            "give --http ADDR too"
        )
    if args.warm_jobs < 1:
        raise DaemonError(f"--warm-jobs {args.warm_jobs}: expected 1 or more")
    if not args.warm and (args.warm_vocab or args.warm_device != DEFAULT_DEVICE):
        raise DaemonError("--warm-vocab and --warm-device go with --warm; give --warm too")
    if args.port_file is not None:  # written where checked, whatever a link is aimed at later
        args.port_file = check_port_file(args.port_file)


def raise_descriptor_limit(ceiling: int = 1 << 20) -> None:
    """Raise this process's soft descriptor limit to its hard limit (at most ``ceiling``), as
    Go's runtime does for every server: the listeners' connection caps are shares of it, and a
    soft limit of 1,024 (systemd's default) leaves the unix socket, gRPC and HTTP little room."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = ceiling if hard == resource.RLIM_INFINITY else min(hard, ceiling)
    if soft != resource.RLIM_INFINITY and soft < target:
        # A container that forbids it keeps its soft limit (the caps then follow that one).
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def default_listen(settings: Settings) -> list[str]:
    """Where ``serve`` listens without ``--listen``: TCP on 127.0.0.1 (flagd/OpenFeature
    providers) and the node's unix socket (``KERNELPOLICY_SOCKET``, else this user's own),
    where ``connect()``, ``status`` and the workers' reports look for it."""
    from kernelpolicy.server.daemon import DEFAULT_PORT, default_unix_socket

    return [f"127.0.0.1:{DEFAULT_PORT}", settings.socket or default_unix_socket()]
