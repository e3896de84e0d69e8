"""The real readers of kernelpolicy's output formats, for tests: bash (``eval`` and
``set -a; .``), python-dotenv, PyYAML and json; and nfd-worker's reading of a feature file.

Each reader returns what it understood, so that a test can compare it with what was meant;
:func:`bash_read` also reports what the shell printed on stderr and whether anything was
created in its working directory (nothing may run).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from dotenv import dotenv_values

BAIT = "pwned"
"""The file the hostile test values try to create (``touch pwned``)."""

_PRINT = 'for n in "$@"; do eval "printf \'%s\\0%s\\0\' \\"\\${$n+set}\\" \\"\\${$n-}\\""; done'


@dataclass(frozen=True)
class ShellRead:
    values: dict[str, str | None]
    stderr: str
    created: list[str]
    returncode: int


def bash_read(text: str, names: Iterable[str], how: str) -> ShellRead:
    """Run ``text`` in a clean bash (``how``: ``eval`` for ``eval "$(cat file)"``, ``source``
    for ``set -a; . file``) in an empty directory, and read each variable back (None: unset)."""
    names = list(names)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp, "work")
        work.mkdir()
        script = Path(tmp, "out")
        script.write_bytes(text.encode("utf-8"))
        load = 'eval "$(cat "$0")"' if how == "eval" else 'set -a; . "$0"; set +a'
        done = subprocess.run(
            ["bash", "--norc", "--noprofile", "-c", f"{load}\n{_PRINT}", str(script), *names],
            cwd=work, env={"PATH": os.environ["PATH"]}, capture_output=True, timeout=60,
            check=False,
        )  # fmt: skip
        created = sorted(os.listdir(work))
    fields = done.stdout.decode("utf-8", "surrogateescape").split("\0")
    values = {
        name: fields[2 * i + 1] if fields[2 * i] == "set" else None
        for i, name in enumerate(names)
        if 2 * i + 1 < len(fields)
    }
    return ShellRead(values, done.stderr.decode("utf-8", "replace"), created, done.returncode)


def dotenv_read(text: str) -> dict[str, str | None]:
    """What python-dotenv's ``dotenv_values`` reads from a file holding ``text``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, ".env")
        path.write_bytes(text.encode("utf-8"))
        return dict(dotenv_values(path))


def yaml_read(text: str) -> Any:
    """PyYAML's reading of ``text`` (``safe_load``)."""
    return yaml.safe_load(io.StringIO(text))


def kubernetes_expand(text: str, defined: Mapping[str, str]) -> str:
    """What a container gets for an env value, command or arg written as ``text``: the kubelet's
    expansion (k8s.io/kubernetes third_party/forked/golang/expansion/expand.go, ported rule for
    rule): ``$$`` is ``$``, ``$(NAME)`` the value of an earlier-defined NAME (kept as written
    when none), any other ``$`` itself."""
    out, cursor = [], 0
    while cursor < len(text):
        if text[cursor] != "$" or cursor + 1 == len(text):
            out.append(text[cursor])
            cursor += 1
            continue
        following = text[cursor + 1]
        if following == "$":
            out.append("$")
            cursor += 2
        elif following == "(" and (close := text.find(")", cursor + 2)) != -1:
            name = text[cursor + 2 : close]
            out.append(defined.get(name, f"$({name})"))
            cursor = close + 1
        elif following == "(":
            out.append("$(")
            cursor += 2
        else:
            out.append("$" + following)
            cursor += 2
    return "".join(out)


def json_read(text: str) -> Any:
    return json.loads(text)


def nfd_read(text: str) -> tuple[dict[str, str], list[str]]:
    """Labels and directives as nfd-worker's ``local`` source reads a feature file: one line
    per ``\\n``, trimmed; ``#`` starts a comment, ``# +`` a directive; else ``name=value``."""
    labels: dict[str, str] = {}
    directives: list[str] = []
    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if line.startswith("# +"):
                directives.append(line)
            continue
        key, _, value = line.partition("=")
        labels[key] = value
    return labels, directives
