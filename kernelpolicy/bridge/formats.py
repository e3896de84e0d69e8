"""Render :class:`EngineSettings` for a shell, a dotenv file, JSON or a Kubernetes container.

Every format carries the variables; the flags go where the format can hold them (JSON, the
container's ``args``) and otherwise into a comment that says where they belong. A choice made per
call by batch or dtype, which no variable can carry, is a comment too (``per_batch`` and
``per_dtype`` in JSON; on stderr for ``k8s-json``, a container fragment with no room for it).

Each format has one encoder, and every byte of the output goes through it; nothing from a
platform snapshot, a policy or the command line reaches the output as it came:

- ``shell``: ``export NAME='value'`` (:func:`shlex.quote`); ``eval`` or ``.`` runs nothing.
- ``dotenv``: each value bare, in single or in double quotes, whichever python-dotenv (the
  loader the format is named after) and a POSIX shell (``set -a; . file``) both read as the
  value itself; a value no quoting carries for both is refused (:func:`dotenv_value`).
- ``k8s``: YAML double-quoted scalars that escape everything but printable ASCII, each ``$``
  doubled (:func:`kubernetes_literal`: Kubernetes expands ``$(NAME)`` and reads ``$$`` as ``$``).
- ``json``, ``k8s-json``: :func:`json.dumps` (ASCII); ``k8s-json`` doubles each ``$`` too.
- comments (headers, flags, notes): :func:`kernelpolicy.encoding.escaped`, one line always.

A value no environment or command line can hold (a NUL, text that is not UTF-8) and a
variable name that is not one are refused in every format (:class:`EncodingError`).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable

from kernelpolicy.bridge.model import EngineSettings
from kernelpolicy.encoding import EncodingError, described, escaped, yaml_quoted

__all__ = ["FORMATS", "EncodingError", "comment", "dotenv_value", "render", "shell_assignment"]

FORMATS = ("shell", "dotenv", "json", "k8s", "k8s-json")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Read as itself by python-dotenv and by a shell, unquoted: no space, quote, $, `, \, #, ~.
_BARE = re.compile(r"[A-Za-z0-9_./:,+@%-]*")
# What python-dotenv expands in every quoting, with no escape (a superset of its pattern).
_DOTENV_REFERENCE = re.compile(r"\$\{[^}]*\}")


def render(settings: EngineSettings, fmt: str) -> str:
    """The settings in ``fmt`` (one of :data:`FORMATS`), ending in a newline.

    Raises:
        EncodingError: A variable name, value or flag the format cannot carry exactly.
    """
    renderer = _RENDERERS.get(fmt)
    if renderer is None:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    check_settings(settings)
    return renderer(settings)


def check_settings(settings: EngineSettings) -> None:
    """Refuse what no format can carry: a name that is not a variable name, a NUL (no
    environment or command line holds one), text that is not UTF-8.

    Raises:
        EncodingError: Naming the variable or flag and the character.
    """
    for name, value in settings.env.items():
        if _NAME.fullmatch(name) is None:
            raise EncodingError(
                f"{described(name)} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)"
            )
        _check_text(value, f"the value of {name}")
    for word in settings.flags:
        _check_text(word, f"the flag {described(word)}")


def _check_text(text: str, what: str) -> None:
    if "\0" in text:
        raise EncodingError(f"{what} holds a NUL character, which no environment can carry")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EncodingError(
            f"{what} is not valid UTF-8 text (it holds {described(text[exc.start])}); "
            "it cannot be written"
        ) from None


def comment(text: str) -> str:
    """One comment line: ``# text``, every character that could end the line escaped."""
    return f"# {escaped(text)}"


def shell_assignment(name: str, value: str) -> str:
    """``export NAME='value'``: a POSIX shell reads ``value`` exactly and runs nothing."""
    return f"export {name}={shlex.quote(value)}"


def dotenv_value(name: str, value: str) -> str:
    """``value`` written so that python-dotenv and ``set -a; . file`` both read it exactly.

    Bare where it holds only ``[A-Za-z0-9_./:,+@%-]``; else in single quotes (both read them
    literally, but python-dotenv turns ``\\\\`` into ``\\``), else in double quotes with ``\\``
    and ``"`` escaped (the escapes both readers share; a shell would expand ``$`` and `````).

    Raises:
        EncodingError: ``value`` holds a ``${...}`` (python-dotenv expands it in any
            quoting) or a carriage return (read as a line end), ends in ``\\`` (it would
            escape the closing quote for python-dotenv), or needs single quotes and double
            quotes at once (a ``'`` with a ``$`` or `````).
    """
    if _BARE.fullmatch(value):
        return value
    why = _dotenv_refusal(value)
    if why is None:
        if "'" not in value and "\\\\" not in value:
            return f"'{value}'"
        if "$" not in value and "`" not in value:
            return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        why = "it needs single quotes (for its $ or `) and double quotes (for its ' or \\\\)"
    raise EncodingError(
        f"the dotenv format cannot carry the value of {name}, {described(value)}: {why}; "
        "use --format shell or json"
    )


def _dotenv_refusal(value: str) -> str | None:
    if _DOTENV_REFERENCE.search(value):
        return "python-dotenv expands ${...} in any quoting and has no escape for it"
    if "\r" in value:
        return "python-dotenv reads a carriage return as a line end"
    if value.endswith("\\"):
        return "a final backslash would escape python-dotenv's closing quote"
    return None


def _header(settings: EngineSettings) -> str:
    engine = settings.label
    return comment(f"kernelpolicy {settings.fingerprint}: settings for {engine}")


def _notes(settings: EngineSettings) -> list[str]:
    return [comment(note) for note in settings.per_call_notes()]


def _lines(lines: list[str]) -> str:
    return "".join(f"{line}\n" for line in lines)


def _shell(settings: EngineSettings) -> str:
    lines = [_header(settings)]
    lines += [shell_assignment(k, v) for k, v in settings.env.items()]
    return _lines(lines + _flags_comment(settings) + _notes(settings))


def _dotenv(settings: EngineSettings) -> str:
    lines = [_header(settings)]
    lines += [f"{k}={dotenv_value(k, v)}" for k, v in settings.env.items()]
    return _lines(lines + _flags_comment(settings) + _notes(settings))


def _flags_comment(settings: EngineSettings) -> list[str]:
    if not settings.flags:
        return []
    return [comment(f"append to the {settings.engine} command line: {shlex.join(settings.flags)}")]


def kubernetes_literal(text: str) -> str:
    """``text`` as Kubernetes must be given it to pass it on unchanged: it expands ``$(NAME)``
    in a container's env values, command and args, and reads ``$$`` as ``$``, so every ``$`` is
    doubled (k8s.io/kubernetes third_party/forked/golang/expansion/expand.go)."""
    return text.replace("$", "$$")


def _k8s_yaml(settings: EngineSettings) -> str:
    lines = [_header(settings), "env:" if settings.env else "env: []"]
    for key, value in settings.env.items():
        lines += [
            f"- name: {yaml_quoted(key)}",
            f"  value: {yaml_quoted(kubernetes_literal(value))}",
        ]
    if settings.flags:
        lines.append(comment("append to the container's args:"))
        lines += [comment(f"- {yaml_quoted(kubernetes_literal(word))}") for word in settings.flags]
    return _lines(lines + _notes(settings))


def _json(settings: EngineSettings) -> str:
    return json.dumps(settings.to_dict(), indent=2, ensure_ascii=True) + "\n"


def _k8s_json(settings: EngineSettings) -> str:
    env = [{"name": k, "value": kubernetes_literal(v)} for k, v in settings.env.items()]
    args = [kubernetes_literal(word) for word in settings.flags]
    return json.dumps({"env": env, "args": args}, indent=2) + "\n"


_RENDERERS: dict[str, Callable[[EngineSettings], str]] = {
    "shell": _shell,
    "dotenv": _dotenv,
    "json": _json,
    "k8s": _k8s_yaml,
    "k8s-json": _k8s_json,
}
