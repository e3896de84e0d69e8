"""Options, inputs and help shared by the commands: --platform, --env, --policies."""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelpolicy.encoding import escaped_lines
from kernelpolicy.errors import KernelPolicyError, PolicyError
from kernelpolicy.limits import shown
from kernelpolicy.platform.model import Platform, load_platform, load_platform_stream

if TYPE_CHECKING:
    from kernelpolicy.policy.compiled import PolicySet
    from kernelpolicy.settings import Settings


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help, with descriptions and epilogs wrapped as prose and examples kept.

    A run of unindented lines is one paragraph, filled to argparse's width (``COLUMNS``, else the
    terminal's, less 2). An indented line (an example, a command line) is kept as written, and
    folded at spaces under a deeper indent only where it is wider than that; blank lines between
    paragraphs stay. Every parser of the command line uses it (``formatter_class``).
    """

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        lines: list[str] = []
        paragraph: list[str] = []
        for line in text.splitlines():
            if line.strip() and not line[0].isspace():
                paragraph.append(line)
                continue
            lines += _filled(_words(paragraph), width, indent, indent)
            paragraph = []
            if not line.strip():
                lines.append("")
            elif len(indent + line) <= width:
                lines.append(indent + line)
            else:
                lead = indent + line[: len(line) - len(line.lstrip())]
                lines += _filled(line.strip(), width, lead, lead + "    ")
        lines += _filled(_words(paragraph), width, indent, indent)
        return "\n".join(lines)


def _words(lines: list[str]) -> str:
    """A paragraph's lines as one line, each run of whitespace one space."""
    return " ".join(" ".join(lines).split())


def _filled(text: str, width: int, first: str, rest: str) -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken at spaces (a longer word stays
    whole); a run of spaces inside a line stays."""
    return textwrap.wrap(
        text, width, initial_indent=first, subsequent_indent=rest,
        break_long_words=False, break_on_hyphens=False,
    )  # fmt: skip


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun``, plural unless the count is one: "1 gate", "2 gates", "0 gates"."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"


def add_platform_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--platform", metavar="FILE", type=Path,
        help="answer for the machine in this snapshot ('kernelpolicy probe --json'; - for stdin) "
        "instead of probing this one",
    )  # fmt: skip


def add_resolve_options(parser: argparse.ArgumentParser) -> None:
    """--platform, --env, --policies: what an answer is worked out from."""
    add_platform_option(parser)
    add_answer_options(parser)


def add_answer_options(
    parser: argparse.ArgumentParser,
    *,
    env_help: str = "set an environment variable for this answer (repeatable; K= unsets it)",
) -> None:
    """--env and --policies (``matrix`` says its --env is set on every platform)."""
    parser.add_argument("--env", metavar="K=V", action="append", default=[], help=env_help)
    add_policies_option(parser)


def add_policies_option(parser: argparse.ArgumentParser) -> None:
    """--policies: the policy files and directories, in every command that reads them."""
    parser.add_argument(
        "--policies", metavar="PATH", action="append", type=Path,
        help="policy file or directory (repeatable; default: KERNELPOLICY_POLICY_PATHS or the "
        "bundled pack); with a leading + it is added to the bundled pack, which it replaces "
        "otherwise: +/etc/kernelpolicy/policies.d",
    )  # fmt: skip


def add_tls_client_options(parser: argparse.ArgumentParser) -> None:
    """--tls-ca, --tls-cert, --tls-key: how a command reaches a TCP daemon that speaks TLS."""
    parser.add_argument(
        "--tls-ca", metavar="FILE", type=Path,
        help="speak TLS to TCP daemons, trusting the CA certificates of FILE (PEM; the "
        "daemon's KERNELPOLICY_TLS_CERT_FILE itself for a self-signed one)",
    )  # fmt: skip
    parser.add_argument(
        "--tls-cert", metavar="FILE", type=Path,
        help="this client's certificate (PEM), for a daemon with KERNELPOLICY_TLS_CLIENT_CA_FILE",
    )  # fmt: skip
    parser.add_argument(
        "--tls-key", metavar="FILE", type=Path, help="the private key of --tls-cert (PEM)"
    )


def tls_options_given(args: argparse.Namespace) -> list[str]:
    """The --tls-* options given, in the order --tls-ca, --tls-cert, --tls-key."""
    return [f"--tls-{o}" for o in ("ca", "cert", "key") if getattr(args, f"tls_{o}")]


def refuse_tls_without(args: argparse.Namespace, target: str) -> None:
    """Raise when a --tls-* option is given without ``target``, the option naming the daemon
    they say how to reach (``--daemons``, ``--address``).

    Raises:
        SettingsError: A --tls-* option without ``target``.
    """
    if tls_options_given(args):
        from kernelpolicy.errors import SettingsError

        raise SettingsError(
            f"--tls-ca, --tls-cert and --tls-key say how to reach {target}; give {target} too"
        )


def tls_credentials(args: argparse.Namespace, addresses: Sequence[str]) -> Any:
    """The grpc channel credentials the --tls-* options ask for, or None (plain gRPC).

    Raises:
        DaemonError: A --tls-* option with a unix socket address, an unpaired --tls-cert or
            --tls-key, or a file that is not what the option needs.
    """
    given = tls_options_given(args)
    if not given:
        return None
    from kernelpolicy.errors import DaemonError
    from kernelpolicy.server.tls import client_credentials

    for address in addresses:
        if address.startswith("unix:"):
            raise DaemonError(
                f"{given[0]} with {address}: a unix socket speaks no TLS (the daemon checks its "
                "peer's credentials instead); give TCP addresses (host:port) only"
            )
    return client_credentials(args.tls_ca, args.tls_cert, args.tls_key)


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
    then each ``--env K=V`` (:func:`kernelpolicy.cli.provenance.answer_env` says where each
    value came from)."""
    from kernelpolicy.cli.provenance import answer_env

    return answer_env(args, platform).env


def local_environment(args: argparse.Namespace) -> dict[str, str]:
    """This process's environment with each ``--env K=V``: where this machine's own settings
    (policy paths, cache directory, trust) come from, even when answering for a snapshot."""
    return environment(argparse.Namespace(platform=None, env=getattr(args, "env", [])), None)


def local_settings(args: argparse.Namespace) -> Settings:
    """This machine's settings for the command: the ``KERNELPOLICY_*`` variables of this
    process with each ``--env K=V`` (never of a platform snapshot's recorded environment).

    The one place a command takes its own settings from: the policy paths, the trust opt-out
    (``KERNELPOLICY_ALLOW_UNTRUSTED_FILES``, for policy files and the evidence store alike), the
    cache directory and the compiled-pack cache. ``--env`` counts: it is the environment of
    whoever runs the command, for this run.

    Raises:
        SettingsError: A variable has a bad value, naming it.
    """
    from kernelpolicy.settings import settings_from

    return settings_from(local_environment(args))


def local_policies(args: argparse.Namespace, local: Settings) -> PolicySet:
    """The policies ``--policies`` names, else ``local``'s ``KERNELPOLICY_POLICY_PATHS``, else the
    bundled pack, loaded with ``local``'s trust opt-out and compiled-pack cache
    (:func:`kernelpolicy.inputs.load_policies_for`, as every front end loads them).

    Raises:
        SettingsError: A path does not exist, naming the option or variable it came from.
        PolicyError, UntrustedFileError: The files are invalid or may not be trusted.
    """
    from kernelpolicy.inputs import existing_policy_paths, load_policies_for

    given = getattr(args, "policies", None)
    if not given:
        return load_policies_for(local)
    try:
        return load_policies_for(local, existing_policy_paths(given, "--policies"))
    except PolicyError as exc:
        raise _plus_advice(exc, given) from None


CHECK_PLUS_ADVICE = "kernelpolicy check +DIR FILE"
"""How the loader says to add a directory to the bundled pack (a [[disable]] loaded without
the file that defines its feature), in ``check``'s words: the other commands say
``--policies +DIR`` (:func:`_plus_advice`)."""


def _plus_advice(error: PolicyError, given: Sequence[str | Path]) -> PolicyError:
    """``error`` with the loader's advice to add to the bundled pack in the words of the option
    given, ``--policies +DIR`` for each path of it, where none of them had the ``+``."""
    import dataclasses

    if any(str(path).startswith("+") for path in given):
        return error
    plus = " ".join(f"--policies +{path}" for path in given)
    return PolicyError([
        dataclasses.replace(issue, message=issue.message.replace(CHECK_PLUS_ADVICE, plus))
        for issue in error.issues
    ])  # fmt: skip


def disable_abbreviations(parser: argparse.ArgumentParser) -> None:
    """``allow_abbrev=False`` on ``parser`` and every sub-command parser under it.

    argparse otherwise takes ``--platform`` for ``--platforms`` (or any unique prefix) without
    a word; set here, after every command registered, so a new command cannot forget it.
    """
    parser.allow_abbrev = False
    for action in parser._actions:  # argparse has no public walk over sub-parsers
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                disable_abbreviations(child)


def run_guarded(args: argparse.Namespace) -> int:
    """Run a command with the CLI's one error boundary: one line on stderr, never a traceback.

    Returns:
        The command's exit code; 2 for any :class:`KernelPolicyError` (bad input, settings or
        files) and for an unexpected OS or value error; 0 when stdout is a closed pipe.
    """
    try:
        code: int = args.run(args)
    except KernelPolicyError as exc:
        _error(policy_problems(exc) if isinstance(exc, PolicyError) else str(exc))
        return 2
    except BrokenPipeError:  # `kernelpolicy probe | head` is not an error
        _silence_stdout()
        return 0
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except (OSError, ValueError, RecursionError, MemoryError) as exc:
        where = f" ({exc.filename})" if isinstance(exc, OSError) and exc.filename else ""
        detail = (exc.strerror if isinstance(exc, OSError) else None) or str(exc)
        _error(f"{type(exc).__name__}{where}: {shown(detail, 400)}")
        return 2
    except Exception as exc:  # the boundary: even a bug gets one line, never a traceback
        if caused_by_interrupt(exc):  # a Ctrl-C that Python wrapped
            _error("interrupted")
            return 130
        _error(f"internal error, please report it: {type(exc).__name__}: {shown(str(exc), 400)}")
        code = 2
    return code


def policy_problems(error: PolicyError) -> str:
    """A policy error as the error line says it: one issue as it is; several under a header
    line that counts them, one indented line each (as the refusal of several untrusted paths
    reads), so that none is taken for the error line's own."""
    issues = error.issues
    if len(issues) < 2:
        return str(error)
    files = counted(len({issue.file for issue in issues}), "policy file")
    return "\n".join(
        [f"{counted(len(issues), 'problem')} in {files}:", *(f"  {i}" for i in issues)]
    )


def caused_by_interrupt(exc: BaseException) -> bool:
    """Whether a Ctrl-C is behind ``exc``: Python wraps an exception raised while a class is
    made (``__set_name__``, as pydantic's models do at import) in a RuntimeError."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def _error(message: str) -> None:
    # One line: a message with newlines (a PolicyError lists several issues) stays readable,
    # each issue on its own line, all under one "kernelpolicy: error:" prefix.
    # Control characters from foreign text in it (a file, a daemon's answer) are shown, never
    # sent to the terminal.
    print(f"kernelpolicy: error: {escaped_lines(message)}", file=sys.stderr, flush=True)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not complain."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
