"""Evidence: the results ``kernelpolicy verify`` stored for one platform and one set of
library versions.

A small JSON file per key in ``<cache dir>/evidence/``; the key hashes what the results depend
on (the device kind, driver, torch build and every probed library version), so an upgrade of
any of them asks for a new ``kernelpolicy verify``. Imports nothing heavy: the engine reads it.

Evidence decides which kernel runs (``verified = true``), so the store is trusted like a policy
file: it is created private (0700), it is read only when root or this user owns it and nobody
else can write it (the directory, the cache directory above it and the file), and it is written
without following symbolic links, atomically. A store that fails any of this is no evidence,
with the reason in :attr:`Evidence.problem`, never an exception.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kernelpolicy.digest import sha256
from kernelpolicy.errors import EvidenceError, KernelPolicyError
from kernelpolicy.evidence.schema import (
    EVIDENCE_SCHEMA,
    differences,
    results_summary,
    validate_document,
    validate_wire,
)
from kernelpolicy.limits import MAX_EVIDENCE_FILE_BYTES
from kernelpolicy.platform.model import Platform
from kernelpolicy.safeio import parse_json, read_text_bounded, temp_path, write_atomic
from kernelpolicy.settings import default_cache_dir
from kernelpolicy.trust import check_trusted, private_dir

__all__ = [
    "EVIDENCE_SCHEMA",
    "Evidence",
    "EvidenceEntry",
    "default_cache_dir",
    "evidence_dir",
    "evidence_from_json",
    "evidence_path",
    "evidence_to_json",
    "load_evidence",
    "platform_key",
    "prepare_store",
    "store_evidence",
    "temp_path",
]

_STORE = "evidence store"


def platform_key(platform: Platform) -> str:
    """What a verify result depends on, hashed: the key its evidence is stored under.

    Of the libraries, only the kernel stack every probe reads (``DEFAULT_LIBRARIES``) counts:
    ``verify`` probes those, while ``explain``, ``resolve()`` and the daemon also probe what
    their policies name, and all of them must find the same evidence.
    """
    from kernelpolicy.platform.libraries import DEFAULT_LIBRARIES

    device = platform.primary
    material = {
        "vendor": platform.vendor,
        "device": None if device is None else [device.name, device.arch, device.capability],
        "driver": platform.driver.to_dict(),
        "torch": platform.torch.to_dict(),
        "libraries": {
            name: version
            for name, version in sorted(platform.libraries.items())
            if name in DEFAULT_LIBRARIES
        },
    }
    blob = json.dumps(material, sort_keys=True, separators=(",", ":")).encode()
    return sha256(blob).hexdigest()[:16]


@dataclass(frozen=True)
class EvidenceEntry:
    """One implementation's last result: passed as a whole, and per dtype.

    ``dtypes_passed``/``dtypes_failed`` come from the checks that name a dtype;
    ``general_failed`` says a check naming none failed (so no dtype passed as a whole).
    ``dtypes_differ``/``conventions``: dtypes with a check that only differs by a convention
    (such as the tie rule), counted as passed unless the feature needs the same draws.
    """

    passed: bool
    created: str
    summary: str
    source: str
    dtypes_passed: tuple[str, ...] = ()
    dtypes_failed: tuple[str, ...] = ()
    general_failed: bool = False
    dtypes_differ: tuple[str, ...] = ()
    conventions: tuple[str, ...] = ()

    def strict(self) -> EvidenceEntry:
        """This result for a feature that needs the same draws on every implementation
        (``same_draws = true``): a convention difference counts as a failure."""
        if not self.conventions:
            return self
        failed = tuple(sorted({*self.dtypes_failed, *self.dtypes_differ}))
        return replace(
            self, passed=False,
            dtypes_passed=tuple(d for d in self.dtypes_passed if d not in self.dtypes_differ),
            dtypes_failed=failed, general_failed=self.general_failed or not self.dtypes_differ,
            summary=f"{self.summary}; differences count as failures here (same_draws)",
        )  # fmt: skip

    @property
    def names_dtypes(self) -> bool:
        """The checks named dtypes, so the result says which dtypes passed."""
        return bool(self.dtypes_passed or self.dtypes_failed)


@dataclass(frozen=True)
class Evidence:
    """(feature, impl) -> the last verify result on this platform key."""

    key: str
    entries: Mapping[tuple[str, str], EvidenceEntry] = field(default_factory=dict)
    problem: str | None = None  # why the stored evidence could not be used, if it could not

    def get(self, feature: str, impl: str, *, same_draws: bool = False) -> EvidenceEntry | None:
        """The result of ``impl``; with ``same_draws``, convention differences as failures."""
        entry = self.entries.get((feature, impl))
        return entry.strict() if entry is not None and same_draws else entry

    def digest(self) -> str:
        items = sorted(
            (f, i, e.passed, e.created, *_dtype_part(e)) for (f, i), e in self.entries.items()
        )
        return sha256(json.dumps(items).encode()).hexdigest()[:16]


def _dtype_part(entry: EvidenceEntry) -> tuple[object, ...]:
    """What per-dtype routing reads, in the digest only where a check named a dtype (so the
    fingerprints of earlier evidence stay as they were)."""
    if not entry.names_dtypes:
        return ()
    return (list(entry.dtypes_passed), list(entry.dtypes_failed), entry.general_failed)


def evidence_dir(cache_dir: Path | None = None) -> Path:
    """The evidence store: ``<cache dir>/evidence``."""
    return (cache_dir or default_cache_dir()) / "evidence"


def evidence_path(platform: Platform, cache_dir: Path | None = None) -> Path:
    return evidence_dir(cache_dir) / f"{platform_key(platform)}.json"


def prepare_store(cache_dir: Path | None = None, *, allow_untrusted: bool = False) -> Path:
    """Create (or check) the evidence store before anything is written to it.

    ``kernelpolicy verify`` calls it before the suite runs, so that a store it may not write
    fails in a second rather than after minutes of checks.

    Raises:
        UntrustedFileError: The store or the cache directory above it is a link, belongs to
            another user or is writable by others (unless ``allow_untrusted``).
        EvidenceError: The store cannot be created.

    Returns:
        The store directory.
    """
    directory = evidence_dir(cache_dir)
    _prepare_store(directory, allow_untrusted)
    return directory


def load_evidence(
    platform: Platform, cache_dir: Path | None = None, *, allow_untrusted: bool = False
) -> Evidence:
    """The stored evidence for ``platform``; a missing file is no evidence, a bad one says so.

    Args:
        platform: Whose evidence (its :func:`platform_key` names the file).
        cache_dir: ``KERNELPOLICY_CACHE_DIR`` (default :func:`default_cache_dir`).
        allow_untrusted: ``KERNELPOLICY_ALLOW_UNTRUSTED_FILES``: read a store that another user
            owns or can write.

    Returns:
        The entries, or none with :attr:`Evidence.problem` saying why: the store is untrusted
        (naming the file or directory, its owner and mode), unreadable, too large, not JSON, or
        not a valid ``kernelpolicy.evidence/v1`` document for this key. Never raises.
    """
    path = evidence_path(platform, cache_dir)
    key = platform_key(platform)
    try:
        document = _trusted_document(path, key, allow_untrusted)
    except KernelPolicyError as exc:
        return Evidence(key, problem=str(exc))
    if document is None:
        return Evidence(key)
    differ = {
        (r["feature"], r["impl"]): differences(r["checks"])
        for r in document["results"]
        if r["status"] != "skipped"
    }
    entries = {
        name: EvidenceEntry(
            passed,
            created,
            summary,
            str(path),
            dtypes_ok,
            dtypes_bad,
            general,
            *differ.get(name, ((), ())),
        )
        for name, (passed, created, summary, dtypes_ok, dtypes_bad, general) in (
            results_summary(document).items()
        )
    }
    return Evidence(key, entries)


def _trusted_document(path: Path, key: str, allow_untrusted: bool) -> dict[str, Any] | None:
    """The valid document at ``path``, or None when there is none.

    Raises:
        UntrustedFileError: The file, the store or the cache directory may not be trusted.
        EvidenceError: The file cannot be read or is not a valid document for ``key``.
    """
    if not os.path.lexists(path):
        return None
    check_trusted(path.parent, _STORE, allow_untrusted=allow_untrusted)
    check_trusted(path, "evidence file", allow_untrusted=allow_untrusted)

    def fail(message: str) -> EvidenceError:
        return EvidenceError(f"unreadable evidence {message}; run kernelpolicy verify")

    text = read_text_bounded(
        path, limit=MAX_EVIDENCE_FILE_BYTES, limit_name="MAX_EVIDENCE_FILE_BYTES", fail=fail
    )
    return validate_document(parse_json(text, str(path), fail), key, str(path))


def store_evidence(
    platform: Platform,
    results: list[dict[str, Any]],
    created: str,
    cache_dir: Path | None = None,
    *,
    allow_untrusted: bool = False,
) -> Path:
    """Write (merge) results for ``platform``: a later run of one feature keeps the others.

    The directory is created private (0700). The file is written to a new temporary file
    (``O_CREAT | O_EXCL | O_NOFOLLOW``, mode 0600), synced, then renamed onto its name: a
    symbolic link planted at either name is replaced, never written through, and a reader
    never sees half a file.

    Args:
        platform: Whose results (its :func:`platform_key` names the file).
        results: ``ImplReport.to_dict()`` of each implementation checked.
        created: When (ISO 8601), shown by explain.
        cache_dir: ``KERNELPOLICY_CACHE_DIR`` (default :func:`default_cache_dir`).
        allow_untrusted: ``KERNELPOLICY_ALLOW_UNTRUSTED_FILES``: write into a cache directory
            that another user owns or can write (links are still never followed).

    Raises:
        UntrustedFileError: The store or the cache directory above it is a link, belongs to
            another user or is writable by others.
        EvidenceError: The file cannot be written.

    Returns:
        The evidence file.
    """
    path = evidence_path(platform, cache_dir)
    _prepare_store(path.parent, allow_untrusted)
    key = platform_key(platform)
    document = {
        "schema": EVIDENCE_SCHEMA,
        "key": key,
        "created": created,
        "libraries": dict(sorted(platform.libraries.items())),
        "results": _merged_results(path, key, results, allow_untrusted),
    }
    _write_file(path, (json.dumps(document, indent=2) + "\n").encode())
    return path


def _merged_results(
    path: Path, key: str, results: list[dict[str, Any]], allow_untrusted: bool
) -> list[dict[str, Any]]:
    """The stored results at ``path`` with ``results`` in place of those of the same feature
    and implementation (a result of a new pair after the stored ones)."""
    previous: dict[tuple[str, str], dict[str, Any]] = {}
    try:
        old = _trusted_document(path, key, allow_untrusted)
    except KernelPolicyError:
        old = None  # only a valid, trusted document is merged; anything else is replaced
    if old is not None:
        previous = {(r["feature"], r["impl"]): r for r in old["results"]}
    for result in results:
        previous[(result["feature"], result["impl"])] = result
    return list(previous.values())


def _prepare_store(directory: Path, allow_untrusted: bool) -> None:
    if allow_untrusted:
        try:
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise EvidenceError(
                f"cannot create {_STORE} {directory}: {exc.strerror or exc}"
            ) from None
        if directory.is_symlink() or not directory.is_dir():
            raise EvidenceError(f"refusing {_STORE} {directory}: not a directory (a link?)")
        return
    if os.path.lexists(directory) and not directory.is_symlink():
        # private_dir would quietly close an open store; one others could write is refused,
        # since what they planted in it may still be there.
        check_trusted(directory, _STORE)
    private_dir(directory, _STORE)  # creates it 0700; refuses a link or another owner
    check_trusted(directory, _STORE)  # also the cache directory above it


def _write_file(path: Path, data: bytes) -> None:
    try:
        write_atomic(path, data, 0o600)
    except OSError as exc:
        raise EvidenceError(
            f"cannot write evidence {path}: {exc.strerror or exc} "
            f"(at {exc.filename or temp_path(path)})"
        ) from None


def evidence_to_json(evidence: Evidence) -> str:
    """A compact form for the wire (the daemon sends it to clients that rebuild a Resolution)."""
    return json.dumps(
        {
            "key": evidence.key,
            "problem": evidence.problem,
            "entries": [
                [
                    *(feature, impl, e.passed, e.created, e.summary, e.source),
                    *(list(e.dtypes_passed), list(e.dtypes_failed), e.general_failed),
                ]
                for (feature, impl), e in sorted(evidence.entries.items())
            ],
        }
    )


def evidence_from_json(text: str) -> Evidence:
    """The inverse of :func:`evidence_to_json`, for input from a daemon.

    Raises:
        EvidenceError: ``text`` is over ``MAX_EVIDENCE_FILE_BYTES``, not JSON, nested too deep
            or not the shape :func:`evidence_to_json` writes, naming what was wrong.
    """
    source = "evidence from the daemon"
    if len(text) > MAX_EVIDENCE_FILE_BYTES:
        raise EvidenceError(
            f"{source}: {len(text)} characters is over MAX_EVIDENCE_FILE_BYTES "
            f"({MAX_EVIDENCE_FILE_BYTES})"
        )
    data = parse_json(text, source, EvidenceError)
    validate_wire(data, source)
    entries = {
        (row[0], row[1]): EvidenceEntry(
            *row[2:6], *((tuple(row[6]), tuple(row[7]), row[8]) if len(row) > 6 else ())
        )
        for row in data["entries"]
    }
    return Evidence(data["key"], entries, data["problem"])
