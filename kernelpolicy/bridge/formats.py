"""Render :class:`EngineSettings` for a shell, a dotenv file, JSON or a Kubernetes container.

Every format carries the variables; the flags go where the format can hold them (JSON, the
container's ``args``) and otherwise into a comment that says where they belong. A choice made per
call by batch or dtype, which no variable can carry, is a comment too (``per_batch`` and
``per_dtype`` in JSON; on stderr for ``k8s-json``, a container fragment with no room for it).
"""

from __future__ import annotations

import json
import re
import shlex

from kernelpolicy.bridge.model import EngineSettings

FORMATS = ("shell", "dotenv", "json", "k8s", "k8s-json")
_BARE = re.compile(r"^[A-Za-z0-9_./:,+@%-]*$")


def render(settings: EngineSettings, fmt: str) -> str:
    """The settings in ``fmt`` (one of :data:`FORMATS`), ending in a newline."""
    if fmt == "json":
        return json.dumps(settings.to_dict(), indent=2) + "\n"
    if fmt == "k8s-json":
        document = {"env": _k8s_env(settings), "args": list(settings.flags)}
        return json.dumps(document, indent=2) + "\n"
    if fmt == "k8s":
        return _k8s_yaml(settings)
    header = f"# kernelpolicy {settings.fingerprint}: settings for {_engine(settings)}"
    if fmt == "shell":
        lines = [f"export {k}={shlex.quote(v)}" for k, v in settings.env.items()]
    elif fmt == "dotenv":
        lines = [f"{k}={_dotenv_value(v)}" for k, v in settings.env.items()]
    else:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    notes = [f"# {note}" for note in settings.per_call_notes()]
    return "\n".join([header, *lines, *_flags_comment(settings), *notes]) + "\n"


def _engine(settings: EngineSettings) -> str:
    return f"{settings.engine} {settings.version}" if settings.version else settings.engine


def _flags_comment(settings: EngineSettings) -> list[str]:
    if not settings.flags:
        return []
    return [f"# append to the {settings.engine} command line: {shlex.join(settings.flags)}"]


def _dotenv_value(value: str) -> str:
    """Bare where that is unambiguous, else double-quoted with escapes (python-dotenv, compose)."""
    if _BARE.match(value):
        return value
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


def _k8s_env(settings: EngineSettings) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in settings.env.items()]


def _k8s_yaml(settings: EngineSettings) -> str:
    # JSON strings are YAML double-quoted scalars, so every value round-trips exactly.
    lines = [f"# kernelpolicy {settings.fingerprint}: settings for {_engine(settings)}", "env:"]
    if not settings.env:
        lines[-1] = "env: []"
    for key, value in settings.env.items():
        lines += [f"- name: {key}", f"  value: {json.dumps(value)}"]
    if settings.flags:
        lines.append("# append to the container's args:")
        lines += [f"# - {json.dumps(word)}" for word in settings.flags]
    lines += [f"# {note}" for note in settings.per_call_notes()]
    return "\n".join(lines) + "\n"
