"""Options and inputs shared by the commands: --platform, --env, --policies."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from kernelpolicy.errors import SettingsError
from kernelpolicy.platform.model import Platform, load_platform, load_platform_stream


def add_platform_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--platform", metavar="FILE", type=Path,
        help="answer for the machine in this snapshot ('kernelpolicy probe --json'; - for stdin) "
        "instead of probing this one",
    )  # fmt: skip


def add_resolve_options(parser: argparse.ArgumentParser) -> None:
    add_platform_option(parser)
    parser.add_argument(
        "--env", metavar="K=V", action="append", default=[],
        help="set an environment variable for this answer (repeatable; K= unsets it)",
    )  # fmt: skip
    parser.add_argument(
        "--policies", metavar="PATH", action="append", type=Path,
        help="policy file or directory (repeatable; default: KERNELPOLICY_POLICY_PATHS or the "
        "bundled pack)",
    )  # fmt: skip


def obtain_platform(args: argparse.Namespace, **probe_kwargs: Any) -> Platform:
    """``--platform FILE`` (or stdin with ``-``), else a probe of this machine."""
    path = getattr(args, "platform", None)
    if path is not None:
        if str(path) == "-":
            return load_platform_stream(sys.stdin.buffer, "<stdin>")
        return load_platform(path)
    from kernelpolicy.platform.probing import probe

    return probe(**probe_kwargs)


def environment(args: argparse.Namespace, platform: Platform | None) -> dict[str, str]:
    """The environment an answer uses: the snapshot's (with --platform) or this process's,
    then each ``--env K=V``."""
    env = (
        dict(platform.env)
        if getattr(args, "platform", None) is not None and platform
        else dict(os.environ)
    )
    for item in getattr(args, "env", []):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SettingsError(f"--env {item!r}: expected KEY=VALUE (KEY= unsets KEY)")
        if value:
            env[key] = value
        else:
            env.pop(key, None)
    return env


def allow_untrusted_files() -> bool:
    """The trust opt-out of whoever runs the command: ``KERNELPOLICY_ALLOW_UNTRUSTED_FILES`` of
    this process (never of a platform snapshot's recorded environment)."""
    from kernelpolicy.settings import parse_bool

    raw = os.environ.get("KERNELPOLICY_ALLOW_UNTRUSTED_FILES")
    return raw is not None and parse_bool("KERNELPOLICY_ALLOW_UNTRUSTED_FILES", raw)
