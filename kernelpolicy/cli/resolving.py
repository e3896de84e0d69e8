"""Resolve the way ``explain`` does, for the commands that render a resolution (explain, env,
exec): the policies from --policies or settings, the platform from --platform or a probe, the
environment from the snapshot or this process with --env; gathered by
:func:`kernelpolicy.inputs.gather`, as every front end does. On this node (no --platform), the
candidates its daemon halted are left out, as ``resolve()`` leaves them out."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping

from kernelpolicy.cli.common import local_policies, local_settings, obtain_platform
from kernelpolicy.cli.provenance import AnswerEnv, answer_env
from kernelpolicy.engine.resolution import Resolution
from kernelpolicy.platform.model import Platform


def resolve_args(
    args: argparse.Namespace, env: Mapping[str, str] | None = None
) -> tuple[Resolution, dict[str, str]]:
    """The resolution the command's options ask for, and the environment it used.

    Args:
        args: Parsed options with ``platform``, ``policies`` and (optionally) ``env``.
        env: Use this environment instead of the snapshot's or this process's.
    """
    resolution, inputs = _resolve(args, env)
    return resolution, inputs.env if inputs is not None else dict(env or {})


def resolve_explained(args: argparse.Namespace) -> tuple[Resolution, AnswerEnv]:
    """As :func:`resolve_args`, with where each variable of the environment came from."""
    resolution, inputs = _resolve(args, None)
    assert inputs is not None  # only an explicit env has none
    return resolution, inputs


def resolve_from_daemon(args: argparse.Namespace) -> tuple[Resolution, AnswerEnv]:
    """The Resolution of the daemon at ``--address`` (rebuilt here from its inputs, with its
    fingerprint), and its environment. The Resolution carries what the daemon said of its own
    state beside the answer: its ``revision`` and its last reload error (``policy_error``:
    the answer is then from the last good policies), which a command must not drop.

    Raises:
        SettingsError: ``--address`` with an option that describes this machine's inputs.
        DaemonError: The address is not one, or no daemon answered there.
    """
    from kernelpolicy.cli.common import tls_credentials
    from kernelpolicy.cli.provenance import daemon_env
    from kernelpolicy.cli.status_cmd import quiet_grpc
    from kernelpolicy.errors import SettingsError
    from kernelpolicy.server.addresses import check_address

    quiet_grpc()  # before grpc is imported: a failed handshake logs no C-core lines
    from kernelpolicy.server.client import connect  # imports grpc

    local = [o for o in ("platform", "env", "policies") if getattr(args, o, None)]
    if local:
        raise SettingsError(
            f"--address with --{local[0]}: the daemon answers with its own snapshot, "
            "environment and policies; ask it alone, or leave --address out to answer here"
        )
    address = check_address(args.address, "--address")
    credentials = tls_credentials(args, [address])
    with connect(address, timeout=10.0, credentials=credentials) as client:
        resolution = client.resolve()
    return resolution, daemon_env(resolution)


def _resolve(
    args: argparse.Namespace, env: Mapping[str, str] | None
) -> tuple[Resolution, AnswerEnv | None]:
    from kernelpolicy.inputs import gather

    # Policy files, the evidence store and trust are this machine's, even with --platform.
    local = local_settings(args)
    policies = local_policies(args, local)
    told: list[AnswerEnv] = []

    def answer(platform: Platform) -> Mapping[str, str]:
        if env is not None:
            return env
        told.append(answer_env(args, platform))
        return told[0].env

    def source(libraries: list[str], patterns: list[str]) -> Platform:
        return obtain_platform(args, libraries=libraries, env_patterns=patterns)

    inputs = gather(policies, local, env=answer, platform=source)
    halts = None
    if getattr(args, "platform", None) is None:  # this node: without what its daemon halted
        from kernelpolicy.server.node import node_halts

        found = node_halts(local)
        if found.problem is not None:
            print(f"kernelpolicy: warning: {found.problem}", file=sys.stderr)
        halts = found.halts
    return inputs.resolve(halts=halts), (told[0] if told else None)


def add_engine_options(parser: argparse.ArgumentParser) -> None:
    """--engine, --engine-version and --model-kind."""
    from kernelpolicy.bridge import MODEL_KINDS

    parser.add_argument(
        "--engine", required=True, metavar="ENGINE",
        help="the inference engine to tell: vllm, sglang (or another the policies name)",
    )  # fmt: skip
    parser.add_argument(
        "--engine-version", metavar="VERSION", type=engine_version,
        help="the engine's version, PEP 440 (0.12.0, 0.11.1rc2; default: the installed "
        "distribution's, from the probe or the --platform snapshot)",
    )  # fmt: skip
    parser.add_argument(
        "--model-kind", choices=MODEL_KINDS, default="mha",
        help="the kind of model served: mha (default); mla: dense MLA (DeepSeek V2/V3/R1, Kimi "
        "K2), told the MLA attention backend; mla-sparse: MLA with a sparse indexer (DeepSeek "
        "V3.2/V4, GLM-5), told the indexer's settings and no attention backend (vLLM and "
        "SGLang pick their sparse one)",
    )  # fmt: skip


def engine_version(value: str) -> str:
    """``--engine-version``: a version the bridge reads (as the installed one's metadata is
    read), else a usage error naming the form expected; an unreadable installed version keeps
    the bridge's warning, but one typed here is a mistake.

    Raises:
        argparse.ArgumentTypeError: ``value`` is no version.
    """
    from kernelpolicy.limits import shown
    from kernelpolicy.versions import UnreadableVersion, parse_version

    parsed = parse_version(value)
    if isinstance(parsed, UnreadableVersion):
        raise argparse.ArgumentTypeError(
            f"{shown(value)!r} is not a version; expected the engine's release, PEP 440 "
            "(0.12.0, 0.11.1rc2, 0.10.1.1+cu128)"
        )
    return value


def check_engine(resolution: Resolution, engine: str) -> None:
    """An engine no policy names is a usage error, with the names that exist.

    Raises:
        SettingsError: ``engine`` is not named by any policy.
    """
    from kernelpolicy.errors import SettingsError
    from kernelpolicy.suggest import did_you_mean

    known = resolution.policies.engine_names
    if engine not in known:
        raise SettingsError(
            f"--engine {engine!r}: no policy tells that engine anything"
            f"{did_you_mean(engine, known)}; the policies name: {', '.join(known) or 'no engine'}"
        )
