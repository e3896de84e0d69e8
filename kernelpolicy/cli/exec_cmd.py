"""``kernelpolicy exec``: start an engine with the settings that make it follow the policies.

The entrypoint of an inference container: resolve on this node, log the decision and its
fingerprint, put the settings in the environment, append the flags and replace this process
with the command (``os.execvpe``). Nothing starts when a decision is an error.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelpolicy.bridge.model import Status
from kernelpolicy.cli.common import HelpFormatter, add_platform_option, add_policies_option
from kernelpolicy.cli.resolving import add_engine_options, check_engine, resolve_args

if TYPE_CHECKING:
    from kernelpolicy.bridge.model import EngineSettings


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "exec",
        help="run an engine (vllm serve ...) with the settings that make it follow the policies",
        description=(
            "Resolve the policies on this node, log what the engine is told with the "
            "fingerprint (one line; KERNELPOLICY_LOG_FORMAT=json logs every decision), set "
            "the engine's variables (never overwriting one you set) and append its flags (never "
            "one you gave), then replace this process with COMMAND. COMMAND is looked up first: "
            "127 when COMMAND is not found and 126 when it cannot be run (the shell's codes). "
            "Exits 1 before starting anything when a decision is an error or two decisions need "
            "different values. Once started, the exit status is the engine's."
        ),
        epilog=(
            "examples:\n"
            "  kernelpolicy exec --engine vllm -- \\\n"
            "      vllm serve meta-llama/Llama-3.1-8B-Instruct\n"
            "  kernelpolicy exec --engine sglang -- \\\n"
            "      python3 -m sglang.launch_server --model-path M"
        ),
        formatter_class=HelpFormatter,
        option_notes=_OPTION_NOTES,
    )
    add_engine_options(parser)
    add_platform_option(parser)
    add_policies_option(parser)
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]")
    parser.set_defaults(run=run)


_PRINTS = "exec prints no settings; kernelpolicy env --engine ENGINE does"
_OPTION_NOTES = {
    "--env": "exec reads its own environment: VAR=VALUE kernelpolicy exec --engine ...",
    "--json": _PRINTS,
    "--format": _PRINTS,
}
"""What a usage error says of the options of env and explain that exec does not take."""


def run(args: argparse.Namespace) -> int:
    from kernelpolicy.bridge import engine_settings
    from kernelpolicy.bridge.plugin import ENABLE, plugin_environment
    from kernelpolicy.bridge.process import child_command, child_environment
    from kernelpolicy.cli.env_cmd import report_errors
    from kernelpolicy.errors import SettingsError
    from kernelpolicy.settings import settings_from, switched_on

    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise SettingsError(
            "exec: no command given; expected: kernelpolicy exec --engine vllm -- COMMAND"
        )
    environ = dict(os.environ)
    unstartable = _unstartable(command[0], environ)
    if unstartable is not None:  # first, as a shell: the decisions' log would bury it
        code, why = unstartable
        print(f"kernelpolicy: error: {command[0]}: {why}", file=sys.stderr)
        return code
    resolution, env = resolve_args(args, env=environ)
    check_engine(resolution, args.engine)
    settings = engine_settings(
        resolution, args.engine, env,
        engine_version=args.engine_version or _local_engine(args), model_kind=args.model_kind,
    )  # fmt: skip
    argv, flag_warnings = child_command(command, settings)
    warnings = _warnings(args, resolution.platform.libraries, settings, flag_warnings)
    for warning in warnings:
        print(f"kernelpolicy: warning: {warning}", file=sys.stderr)
    _say_notes(args, resolution, env, settings)
    local = settings_from(environ)
    log_exec(local.log_format, settings, argv, warnings)
    if not settings.ok:
        report_errors(resolution, settings.errors)
        print("kernelpolicy: not starting the engine", file=sys.stderr)
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    child = child_environment(environ, settings)
    snapshot = resolution.platform.to_dict() if args.platform else None
    if switched_on(child, ENABLE):  # a choice the plugin carries, or yours
        for key, value in plugin_environment(
            args.engine, env, settings.fingerprint, snapshot, args.policies
        ).items():
            child.setdefault(key, value)  # your KERNELPOLICY_VLLM_PLUGIN is kept
    child.update(_kernel_cache(local.cache_dir, child))
    return _exec(argv, child)


def _warnings(
    args: argparse.Namespace,
    libraries: Mapping[str, str],
    settings: EngineSettings,
    flag_warnings: list[str],
) -> list[str]:
    """What the engine is told that it may not do as asked, and (with ``--platform``) a
    snapshot that names another release of the engine than the one started."""
    from kernelpolicy.bridge import distribution

    warnings = [*settings.warnings, *flag_warnings]
    named = libraries.get(distribution(args.engine))
    if args.platform and not args.engine_version and settings.version != named and named:
        warnings.append(
            f"the snapshot names {args.engine} {named}; this machine's {args.engine} "
            f"{settings.version} is the one started, and decides what it is told"
        )
    return warnings


def _say_notes(
    args: argparse.Namespace, resolution: Any, env: Mapping[str, str], settings: EngineSettings
) -> None:
    """With --platform, what the snapshot records that the engine does not get; then the
    engine's one choice where select() chooses per call."""
    if args.platform:
        _note_snapshot_unused(resolution, env, settings)
    for note in settings.per_call_notes():
        print(f"kernelpolicy: note: {note}", file=sys.stderr)


def _note_snapshot_unused(resolution: Any, environ: Mapping[str, str], settings: Any) -> None:
    """With --platform: the engine starts here and inherits this shell's environment, so the
    answer uses it (not the snapshot's, as ``env --platform`` does): each variable the answer
    reads that the snapshot records otherwise is said on stderr, with what the engine gets."""
    from kernelpolicy.cli.env_cmd import engine_prefixes
    from kernelpolicy.cli.provenance import left_out
    from kernelpolicy.engine.switches import read_variables
    from kernelpolicy.limits import shown

    read = {*read_variables(resolution.policies), *settings.env}
    snapshot = resolution.platform.env
    prefixes = engine_prefixes(settings.engine)
    for name, value, here in left_out(environ, snapshot, read, prefixes):
        gets = "unset" if here is None else f"{name}={shown(here, 40)}"
        print(
            f"kernelpolicy: note: the snapshot has {name}={shown(value, 40)}, not used: the "
            f"engine starts here with this shell's environment ({gets}), as the answer does; "
            "set it here to use it",
            file=sys.stderr,
        )


def _unstartable(name: str, environ: Mapping[str, str]) -> tuple[int, str] | None:
    """None where ``os.execvpe`` can start ``name`` (a path as given, or a file of that name
    in a directory of PATH, executable by this user); else the shell's exit code and words:
    127 ``command not found``, 126 ``permission denied`` (found, but no such file is
    executable: a directory, a file without its x bit)."""
    paths = (
        [name]
        if os.sep in name
        else [os.path.join(d, name) for d in os.get_exec_path(dict(environ))]
    )
    found = [path for path in paths if os.path.exists(path)]  # a dangling link: not found
    if not found:
        return 127, "command not found"
    if any(os.path.isfile(path) and os.access(path, os.X_OK) for path in found):
        return None
    return 126, "permission denied"


def _exec(argv: list[str], child: dict[str, str]) -> int:
    """Replace this process with the engine; the shell's exit codes where it cannot start."""
    try:
        os.execvpe(argv[0], argv, child)
    except FileNotFoundError:
        print(f"kernelpolicy: error: {argv[0]}: command not found", file=sys.stderr)
        return 127
    except PermissionError:
        print(f"kernelpolicy: error: {argv[0]}: permission denied", file=sys.stderr)
        return 126
    return 0  # pragma: no cover - execvpe does not return


def _kernel_cache(cache_dir: Path | None, child: dict[str, str]) -> dict[str, str]:
    """The node's kernel cache for the engine (kernelpolicy warm fills it), where trusted; a
    cache that is there but untrusted is said and not used."""
    from kernelpolicy.kernel_cache import cache_environment, kernel_cache_dir
    from kernelpolicy.settings import default_cache_dir

    cache = cache_dir or default_cache_dir()
    extra, problem = cache_environment(cache, child)
    if problem is not None and kernel_cache_dir(cache).exists():
        print(f"kernelpolicy: warning: kernel cache not used: {problem}", file=sys.stderr)
    return extra


def _local_engine(args: argparse.Namespace) -> str | None:
    """With --platform, the engine exec starts is this machine's, not the snapshot's: its
    installed release decides what it is told (None where it is not installed here)."""
    if not args.platform:
        return None
    from kernelpolicy.bridge import distribution
    from kernelpolicy.platform.libraries import read_libraries

    return read_libraries([distribution(args.engine)]).versions.get(distribution(args.engine))


def log_exec(fmt: str, settings: EngineSettings, argv: list[str], warnings: list[str]) -> None:
    """The one ``kernelpolicy.exec`` event: the engine's version (where none is installed or
    given, the knob tables' release the rules were matched as, with ``engine_version_assumed``),
    what it is told, and the warnings said on stderr above it. In JSON, for whoever reads the
    logs, every decision as explain words it and each warning; on the console one short line:
    the decisions told to the engine (those that change what it runs), the variables and flags,
    and the number of warnings and errors said in their own lines.

    Its level is error where a decision is, warning where a warning concerns what the engine is
    told; the release note alone (the engine is not installed where exec runs, so the rules
    were matched as a release) is said on its own warning line and leaves the event at info,
    so that a first run on a machine without the engine is not one long warning."""
    if fmt == "off":
        return
    from kernelpolicy.logs import get_logger

    told_warnings = [warning for warning in warnings if warning != settings.release_note]
    log = get_logger(fmt)
    emit = log.error if settings.errors else log.warning if told_warnings else log.info
    fields: dict[str, Any] = {
        "fingerprint": settings.fingerprint,
        "engine": settings.engine,
        "engine_version": settings.matched_version,
        "engine_version_assumed": settings.version_assumed,
        "command": argv[0],
    }
    if fmt == "json":
        fields |= _json_fields(settings, warnings)
    else:  # every string as one bash word: the version is an installed package's own text
        fields |= _console_fields(settings, warnings)
        fields = {key: _as_word(value) for key, value in fields.items()}
    emit("kernelpolicy.exec", **fields)


def _json_fields(settings: EngineSettings, warnings: list[str]) -> dict[str, Any]:
    """Everything: each decision in explain's words, the settings, each warning and error."""
    return {
        "decisions": {n: t.outcome() for n, t in settings.decisions.items()},
        "env": settings.env,
        "flags": list(settings.flags),
        "errors": list(settings.errors) or None,
        "warnings": warnings or None,
        "per_batch": list(settings.per_batch) or None,
        "per_dtype": list(settings.per_dtype) or None,
    }


_TELLS = frozenset({Status.TOLD, Status.PLUGIN, Status.INEXPRESSIBLE, Status.ERROR})
"""The decisions the console line names: those the engine is told (or fails to be)."""


@dataclass(frozen=True)
class _Shell:
    """Text the console line prints as it is: the console renderer prints a value's repr (a
    string's with Python's quotes and escapes once it holds a space or a quote, which no
    shell reads back)."""

    text: str

    def __repr__(self) -> str:
        return self.text


def _as_word(value: object) -> object:
    """A console field: a string as one bash word (:func:`shell_word`), anything else as is."""
    return _Shell(shell_word(value)) if isinstance(value, str) else value


def shell_word(arg: str) -> str:
    """``arg`` as one word that bash reads back exactly, on one printable line: quoted as
    :func:`shlex.quote` does, or as ``$'...'`` where it holds a character that is not
    printable (a newline, a control character) or a byte that is not UTF-8 (an argument
    decoded with surrogate escapes: each such byte is written ``\\xHH``)."""
    if arg.isprintable():
        return shlex.quote(arg)
    return "$'" + "".join(_escaped(char) for char in arg) + "'"


def _escaped(char: str) -> str:
    """One character of a ``$'...'`` word."""
    if char in "\\'":
        return "\\" + char
    if char.isprintable():
        return char
    # a byte that was not UTF-8 (U+DC80..U+DCFF): that byte; any other lone surrogate as is
    undecoded = "\udc80" <= char <= "\udcff"
    raw = char.encode("utf-8", "surrogateescape" if undecoded else "surrogatepass")
    return "".join(f"\\x{byte:02x}" for byte in raw)


def shell_array(words: Iterable[str]) -> str:
    """``(word ...)``: words as a bash array assignment reads them back, delimited on a line
    of other fields."""
    return "(" + " ".join(words) + ")"


def _console_fields(settings: EngineSettings, warnings: list[str]) -> dict[str, Any]:
    """One short line of words: ``told=feature:impl,...`` for the decisions that change what
    the engine runs (``none``: it runs its defaults), out of ``decisions=N``; the variables
    and flags as bash arrays (``env=(NAME=value ...)``, ``flags=(...)``) that bash reads back
    exactly; counts of what is said in lines of its own."""
    told = [
        f"{name}:{told.impl or 'ERROR'}"
        for name, told in settings.decisions.items()
        if told.status in _TELLS
    ]
    fields: dict[str, Any] = {
        "decisions": len(settings.decisions),
        "told": ",".join(told) or "none",
        "env": _words(f"{k}={shell_word(v)}" for k, v in settings.env.items()),
        "flags": _words(shell_word(flag) for flag in settings.flags),
        "errors": len(settings.errors) or None,
        "warnings": len(warnings) or None,
        "per_batch": ",".join(settings.per_batch) or None,
        "per_dtype": ",".join(settings.per_dtype) or None,
    }
    return {key: value for key, value in fields.items() if value is not None}


def _words(words: Iterable[str]) -> _Shell | None:
    """A console field of shell words as a bash array; None where there are none."""
    listed = list(words)
    return _Shell(shell_array(listed)) if listed else None
