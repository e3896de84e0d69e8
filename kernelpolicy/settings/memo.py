"""Validated settings, kept between processes: a process that sets ``KERNELPOLICY_*`` variables
takes their values without importing pydantic-settings when a process on the node has already
validated the same ones (the import is about 110 ms of a first ``resolve()`` on the 2-core
machine, and an engine starts several processes with one environment: its API server, its
engine core, one worker per GPU).

After the settings model validates the variables of an environment (no keyword values), the
values of those variables are written as JSON to ``<cache dir>/settings/<key>.json``. The key
hashes every given variable's name and value, the kernelpolicy version and the size and
modification time of the settings code (as Python stamps its bytecode), so another value, an
upgrade or an edit of a reader is a miss. The entry is used only under the compiled-pack
cache's rules (:mod:`kernelpolicy.policy.packcache`): it and its directory belong to this user
(or root) and no one else can write them, it is a regular file (not a link) within
``MAX_SETTINGS_MEMO_BYTES``, it names the same key and every value has its field's form;
anything wrong is a miss (the model validates, and the entry is rewritten). The directory is
created ``0700``, writes are atomic, the newest ``MEMO_ENTRIES`` entries are kept.
``KERNELPOLICY_PACK_CACHE=0`` (the switch of the validated caches) turns it off; a cache
directory that is relative (it would land wherever the process runs), that
``KERNELPOLICY_CACHE_DIR`` names and does not exist (reading settings must not make it; the
default one is made as the compiled-pack cache makes it) or that cannot be written is no memo.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernelpolicy.digest import file_stamps, sha256
from kernelpolicy.errors import KernelPolicyError
from kernelpolicy.limits import MAX_SETTINGS_MEMO_BYTES
from kernelpolicy.settings.readers import KINDS, Kind, validated_cache_dir, variable
from kernelpolicy.versions import KERNELPOLICY_VERSION

__all__ = ["MEMO_ENTRIES", "recall", "remember"]

FORMAT = 1
MEMO_ENTRIES = 16
"""Entries kept (the newest): each distinct environment writes one."""


class _Miss(KernelPolicyError):
    """The entry cannot be used; the model validates instead."""


def recall(given: Mapping[str, str], names: tuple[str, ...]) -> dict[str, object] | None:
    """The validated values of the variables ``given`` (a setting name -> value for each), as
    an earlier process stored them, or None (no entry, an entry that may not be used, the memo
    off). ``names``: every setting's name, in order."""
    path = _path(given)
    if path is None:
        return None
    try:
        return _read(path, _key(given), names, given)
    except _Miss:
        return None


def remember(given: Mapping[str, str], values: Mapping[str, object]) -> None:
    """Store the model's ``values`` of the variables ``given``; a memo that cannot be written
    is no memo (nothing is raised)."""
    path = _path(given, writing=True)
    if path is None:
        return

    from kernelpolicy.safeio import store_cache_bytes

    try:
        settings = {name: _encode(name, values[name]) for name in _fields(given)}
        entry = {"format": FORMAT, "key": _key(given), "values": settings}
        data = json.dumps(entry, separators=(",", ":")).encode()
    except (TypeError, ValueError):
        return
    store_cache_bytes(
        path, data, limit=MAX_SETTINGS_MEMO_BYTES, keep=MEMO_ENTRIES, what="settings memo"
    )


def _fields(given: Mapping[str, str]) -> list[str]:
    """The setting names of the variables ``given`` (``KERNELPOLICY_LOG_FORMAT`` ->
    ``log_format``)."""
    prefix = len(variable(""))
    return [name[prefix:].lower() for name in given]


def _path(given: Mapping[str, str], *, writing: bool = False) -> Path | None:
    """Where the entry of ``given`` lives (see :func:`validated_cache_dir`; a directory that
    ``KERNELPOLICY_CACHE_DIR`` names is never made for it)."""
    base = validated_cache_dir(given, create=not writing)
    return None if base is None else base / "settings" / f"{_key(given)}.json"


def _key(given: Mapping[str, str]) -> str:
    digest = sha256(f"kernelpolicy {KERNELPOLICY_VERSION} settings format {FORMAT}\0".encode())
    digest.update(_code_stamp().encode())
    for name, value in sorted(given.items()):
        digest.update(name.encode() + b"\0" + value.encode("utf-8", "surrogatepass") + b"\0")
    return digest.hexdigest()[:32]


def _code_stamp() -> str:
    """The settings code (the readers, the model, this memo) and the limits they read."""
    package = Path(__file__).resolve().parent.parent
    files = [*sorted((package / "settings").glob("*.py")), package / "limits.py"]
    return str(package) + "\0" + file_stamps(package, files)


def _read(
    path: Path, key: str, names: tuple[str, ...], given: Mapping[str, str]
) -> dict[str, object]:
    from kernelpolicy.safeio import read_cache_entry

    entry = read_cache_entry(
        path, key=key, version=FORMAT, limit=MAX_SETTINGS_MEMO_BYTES,
        limit_name="MAX_SETTINGS_MEMO_BYTES", links=False,  # never followed, even to ours
    )  # fmt: skip
    if entry is None:
        raise _Miss
    try:
        stored = entry["values"]
        if sorted(stored) != sorted(_fields(given)) or not set(stored) <= set(names):
            raise _Miss
        return {name: _decode(name, value) for name, value in stored.items()}
    except Exception:  # never authoritative: whatever is wrong with it, validate
        raise _Miss from None


def _encode(name: str, value: object) -> Any:
    """The model's value of field ``name`` as JSON, under its kind's tag where JSON has no type
    for it (:data:`_TAGS`)."""
    tag = _TAGS.get(KINDS[name])
    if value is None or (tag is None and isinstance(value, bool | str)):
        return value
    if tag is not None and isinstance(value, Path):
        return {tag: str(value)}
    if tag is not None and isinstance(value, tuple):
        return {tag: [str(item) for item in value]}
    if tag is not None and isinstance(value, Mapping):
        return {tag: dict(value)}
    raise TypeError(f"setting {name}: a value of type {type(value).__name__}")


_TAGS: dict[Kind, str] = {
    "path": "path", "directory": "path", "paths": "paths", "overrides": "map",
}  # fmt: skip
"""The key under which a value of each kind that JSON has no type for is stored."""


def _decode(name: str, value: Any) -> object:
    """A stored value in its field's form (what the model gives, by the field's kind), else a
    miss."""
    kind = KINDS.get(name)
    tag = _TAGS.get(kind) if kind is not None else None
    inner = value.get(tag) if tag is not None and isinstance(value, dict) else None
    if kind in ("path", "directory") and isinstance(inner, str):
        return Path(inner)
    if kind == "paths" and isinstance(inner, list) and _all_str(inner):
        return tuple(Path(item) for item in inner)
    if kind == "overrides" and isinstance(inner, dict) and _all_str([*inner, *inner.values()]):
        return dict(inner)
    if (kind == "boolean" and isinstance(value, bool)) or (
        kind in ("log_format", "socket") and isinstance(value, str)
    ):
        return value
    raise _Miss


def _all_str(items: list[Any]) -> bool:
    return all(isinstance(item, str) for item in items)
