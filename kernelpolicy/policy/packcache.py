"""The compiled-pack cache: a validated policy set, kept between processes.

Loading a pack validates every file with pydantic and compiles every CEL rule: about 100 ms of
a worker's cold start, the same in every process of a node. After a first load, the validated
elements are written as tagged JSON (:mod:`kernelpolicy.policy.record`, never pickle) to
``<cache dir>/packs/<key>.json``; a later process with the same files rebuilds the set from
it without importing pydantic, TOML or the CEL library.

The cache is never trusted over the files:

* the key hashes the text and path of every policy file (as read, after the trust checks),
  the kernelpolicy version and the size and modification time of the code that validates and
  compiles policies (as Python stamps its bytecode), so any edit, reorder, upgrade or schema
  change is a miss;
* a cache file is used only when it and its directory belong to this user (or root) and no one
  else can write them (:func:`kernelpolicy.trust.trust_problem`), it is a regular file within
  ``MAX_PACK_CACHE_BYTES``, and it names the same key; its directory is created ``0700``;
* anything wrong with it (unreadable, truncated, foreign, another format) is a miss: the files
  are loaded and validated as if there were no cache, and the entry is rewritten.

Writes are atomic (:func:`kernelpolicy.safeio.write_atomic`); the newest ``PACK_CACHE_ENTRIES``
entries are kept. ``KERNELPOLICY_PACK_CACHE=0`` turns the cache off.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernelpolicy.digest import file_stamps, sha256
from kernelpolicy.errors import KernelPolicyError
from kernelpolicy.limits import MAX_PACK_CACHE_BYTES
from kernelpolicy.policy.cel import LazyProgram
from kernelpolicy.policy.compiled import (
    CompiledDisable,
    CompiledFeature,
    CompiledGate,
    PolicySet,
    Source,
    compile_candidate,
)
from kernelpolicy.policy.record import decode, encode
from kernelpolicy.versions import KERNELPOLICY_VERSION

__all__ = ["PACK_CACHE_ENTRIES", "cache_key", "load_cached", "pack_dir"]

FORMAT = 1
PACK_CACHE_ENTRIES = 16
"""Cache files kept (the newest): each edit of a pack writes a new one."""

# The code that decides what a cached entry means: the policy package (schema, validators,
# compiled form, records) and the modules its validation reads. Stamped by size and mtime, as
# Python stamps its own bytecode cache: an edit or a reinstall is a miss.
_CODE_DIRS = ("policy", "policy/schema")
_CODE_FILES = ("__init__.py", "limits.py", "versions.py", "dtypes.py", "evidence/model.py")


class _Miss(KernelPolicyError):
    """The entry cannot be used; the files are loaded instead."""


def pack_dir(cache_dir: Path | None) -> Path:
    """``<cache dir>/packs``."""
    from kernelpolicy.settings import default_cache_dir

    return (cache_dir or default_cache_dir()) / "packs"


def cache_key(sources: Sequence[tuple[str, str]]) -> str:
    """What a cached set depends on, hashed: every (path, text), the version, and the code."""
    digest = sha256(f"kernelpolicy {KERNELPOLICY_VERSION} pack format {FORMAT}\0".encode())
    digest.update(_code_stamp().encode())
    for name, text in sources:
        digest.update(name.encode() + b"\0" + text.encode() + b"\0")
    return digest.hexdigest()[:32]


def _code_stamp() -> str:
    package = Path(__file__).resolve().parent.parent
    files = [package / name for name in _CODE_FILES]
    for folder in _CODE_DIRS:
        with contextlib.suppress(OSError):
            files += sorted((package / folder).glob("*.py"))
    return file_stamps(package, files)


def load_cached(sources: Sequence[tuple[str, str]], cache_dir: Path | None) -> PolicySet:
    """The set for ``sources``, from the cache when a trusted entry matches, else loaded from
    the texts (and the entry written, when the cache directory can be prepared).

    Raises:
        PolicyError: The texts are invalid (only on a miss: a valid entry means they were not).
    """
    key = cache_key(sources)
    directory = pack_dir(cache_dir)
    path = directory / f"{key}.json"
    try:
        return _read_entry(path, key)
    except _Miss:
        pass
    from kernelpolicy.policy.loader import load_policy_sources

    policies = load_policy_sources(sources)
    _write(directory, path, key, policies)
    return policies


def _read_entry(path: Path, key: str) -> PolicySet:
    """The set stored at ``path`` for ``key``.

    Raises:
        _Miss: No entry, or one that may not or cannot be used (see the module doc).
    """
    from kernelpolicy.safeio import read_cache_entry

    entry = read_cache_entry(
        path, key=key, version=FORMAT, limit=MAX_PACK_CACHE_BYTES,
        limit_name="MAX_PACK_CACHE_BYTES", links=True,
    )  # fmt: skip
    if entry is None:
        raise _Miss
    try:
        return _build(entry)
    except Exception:  # never authoritative: whatever is wrong with it, load the files
        raise _Miss from None


def _build(entry: dict[str, Any]) -> PolicySet:
    features: dict[str, CompiledFeature] = {}
    for item in entry["features"]:
        spec = decode(item["spec"])
        file = item["file"]
        candidates = tuple(
            compile_candidate(
                item["name"],
                cand,
                Source(file, line),
                LazyProgram(cand.when) if cand.when is not None else None,
            )
            for cand, line in zip(spec.candidates, item["candidate_lines"], strict=True)
        )
        features[item["name"]] = CompiledFeature(
            item["name"], spec, Source(file, item["line"]), candidates
        )
    gates = {
        item["name"]: CompiledGate(
            item["name"],
            (spec := decode(item["spec"])),
            Source(item["file"], item["line"]),
            LazyProgram(spec.rule),
        )
        for item in entry["gates"]
    }
    disables = tuple(
        CompiledDisable(decode(item["spec"]), Source(item["file"], item["line"]))
        for item in entry["disables"]
    )
    return PolicySet.build(features, gates, disables, tuple(entry["files"]), entry["digest"])


def _entry(key: str, policies: PolicySet) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "key": key,
        "files": list(policies.files),
        "digest": policies.digest,
        "features": [
            {
                "name": name,
                "file": feature.source.file,
                "line": feature.source.line,
                "candidate_lines": [c.source.line for c in feature.candidates],
                "spec": encode(feature.spec),
            }
            for name, feature in policies.features.items()
        ],
        "gates": [
            {"name": name, "file": g.source.file, "line": g.source.line, "spec": encode(g.spec)}
            for name, g in policies.gates.items()
        ],
        "disables": [
            {"file": d.source.file, "line": d.source.line, "spec": encode(d.spec)}
            for d in policies.disables
        ],
    }


def _write(directory: Path, path: Path, key: str, policies: PolicySet) -> None:
    """Store the entry; a cache that cannot be written is no cache (nothing is raised)."""
    from kernelpolicy.safeio import store_cache_bytes

    try:
        data = json.dumps(_entry(key, policies), separators=(",", ":")).encode()
    except (TypeError, ValueError):
        return
    store_cache_bytes(
        path, data, limit=MAX_PACK_CACHE_BYTES, keep=PACK_CACHE_ENTRIES, what="compiled-pack cache"
    )
