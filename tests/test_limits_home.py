"""Every limit on input lives in ``kernelpolicy/limits.py`` (docs/design.md): no module of the
package defines a ``*_CHARS``, ``*_BYTES`` or ``MAX_*`` constant of its own, but those listed
here, each with why it stays."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "kernelpolicy"
LIMIT_NAME = re.compile(r"_?(MAX_\w+|\w+_CHARS|\w+_BYTES)")
LIMIT_LINE = re.compile(r"^[\w, (]*(MAX_|_CHARS|_BYTES)", re.MULTILINE)  # at the top level

DISPLAY = {
    "platform/model.py:_MAX_LISTED": "validation problems listed in one error",
    "policy/files.py:MAX_UNTRUSTED_SHOWN": "untrusted paths named in one error",
    "policy/schema_messages.py:_SHOWN_CHARS": "a value shown in a validation message",
    "trust.py:MAX_NAMED_ABOVE": "directories named in one message",
    "labels.py:_HASH_CHARS": "the hash kept in a label value kernelpolicy writes",
    "logs.py:_EVENT_TEXT_CHARS": "a text (an error, a warning, a name) in a resolution's event",
}
"""Cuts and counts of what a message shows: display, not a bound on input."""

NOT_LIMITS = {
    "labels.py:MAX_PREFIX_CHARS": "Kubernetes' label syntax, for labels kernelpolicy writes",
    "labels.py:MAX_NAME_CHARS": "Kubernetes' label syntax, for labels kernelpolicy writes",
    "labels.py:MAX_VALUE_CHARS": "Kubernetes' label syntax, for labels kernelpolicy writes",
    "fleet/inventory.py:_NODE_NAME_CHARS": "Kubernetes' node name syntax (a DNS subdomain)",
    "server/addresses.py:MAX_PORT": "TCP's port range",
    "server/sockets.py:MAX_SOCKET_PATH_BYTES": "Linux's sun_path, not a choice of ours",
    "server/relay_pump.py:READ_CHUNK_BYTES": "a read's size, not a bound on what is read",
    "kernels/sampling_triton/graphs.py:COPY_BYTES": "a tuning threshold of CUDA graphs",
}
"""Facts of other systems and tuning figures, not bounds kernelpolicy chooses on input."""

NOT_MOVED_YET: dict[str, str] = {}
"""Bounds on input (a daemon's answer, a file, a client, an argument) still in their modules:
each belongs in limits.py, with a docstring, when its module is next changed. None left."""


def _module_constants(path: Path) -> list[str]:
    """The names bound at the top level of ``path`` (assignments, annotated or not)."""
    text = path.read_text()
    if not LIMIT_LINE.search(text):
        return []  # parsing all of the package takes over a second; few files have one
    names = []
    for node in ast.parse(text, str(path)).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            names += [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]
    return names


def test_limits_live_in_limits_py() -> None:
    """A new ``*_CHARS``/``*_BYTES``/``MAX_*`` constant outside limits.py fails here: move it
    there with a docstring, or, for a display cut, list it in DISPLAY."""
    allowed = DISPLAY.keys() | NOT_LIMITS.keys() | NOT_MOVED_YET.keys()
    found = [
        f"{path.relative_to(PACKAGE).as_posix()}:{name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != PACKAGE / "limits.py" and "_generated" not in path.parts
        for name in _module_constants(path)
        if LIMIT_NAME.fullmatch(name)
    ]
    assert [name for name in found if name not in allowed] == []


def test_every_limit_is_documented() -> None:
    """Each limit-named constant of limits.py has a docstring (the string right after it)."""
    body = ast.parse((PACKAGE / "limits.py").read_text()).body
    bare = [
        target.id
        for node, after in zip(body, [*body[1:], None], strict=True)
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name) and LIMIT_NAME.fullmatch(target.id)
        if not (
            isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        )
    ]
    assert bare == []
