"""Evidence: stored conformance results for one platform and one set of library versions.

A small JSON file per key in ``<cache dir>/evidence/``; the key hashes what the results depend
on (the device kind, driver, torch build and every probed library version), so an upgrade of
any of them asks for a new ``kernelpolicy verify``. Imports nothing heavy: the engine reads it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelpolicy.platform.model import Platform

EVIDENCE_SCHEMA = "kernelpolicy.evidence/v1"


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kernelpolicy"


def platform_key(platform: Platform) -> str:
    """What conformance results depend on, hashed."""
    device = platform.primary
    material = {
        "vendor": platform.vendor,
        "device": None if device is None else [device.name, device.arch, device.capability],
        "driver": platform.driver.model_dump(mode="json"),
        "torch": platform.torch.model_dump(mode="json"),
        "libraries": dict(sorted(platform.libraries.items())),
    }
    blob = json.dumps(material, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


@dataclass(frozen=True)
class EvidenceEntry:
    passed: bool
    created: str
    summary: str
    source: str


@dataclass(frozen=True)
class Evidence:
    """(feature, impl) -> the last conformance result on this platform key."""

    key: str
    entries: Mapping[tuple[str, str], EvidenceEntry] = field(default_factory=dict)
    problem: str | None = None  # why the stored evidence could not be read, if it could not

    def get(self, feature: str, impl: str) -> EvidenceEntry | None:
        return self.entries.get((feature, impl))

    def digest(self) -> str:
        items = sorted((f, i, e.passed, e.created) for (f, i), e in self.entries.items())
        return hashlib.sha256(json.dumps(items).encode()).hexdigest()[:16]


def evidence_path(platform: Platform, cache_dir: Path | None = None) -> Path:
    return (cache_dir or default_cache_dir()) / "evidence" / f"{platform_key(platform)}.json"


def load_evidence(platform: Platform, cache_dir: Path | None = None) -> Evidence:
    """The stored evidence for ``platform``; a missing file is no evidence, a broken one says so."""
    path = evidence_path(platform, cache_dir)
    key = platform_key(platform)
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        return Evidence(key)
    except (OSError, json.JSONDecodeError) as exc:
        return Evidence(
            key, problem=f"{path}: unreadable evidence ({exc}); run kernelpolicy verify"
        )
    if document.get("schema") != EVIDENCE_SCHEMA or document.get("key") != key:
        return Evidence(key, problem=f"{path}: not {EVIDENCE_SCHEMA} for key {key}")
    entries = {}
    for result in document.get("results", []):
        if result.get("status") == "skipped":
            continue
        failing = [c["check"] for c in result.get("checks", []) if not c.get("passed")]
        summary = "all checks passed" if not failing else f"failed: {', '.join(failing[:3])}"
        entries[(result["feature"], result["impl"])] = EvidenceEntry(
            result.get("status") == "passed", document.get("created", "?"), summary, str(path)
        )
    return Evidence(key, entries)


def store_evidence(
    platform: Platform, results: list[dict[str, Any]], created: str, cache_dir: Path | None = None
) -> Path:
    """Write (merge) results for ``platform``: a later run of one feature keeps the others."""
    path = evidence_path(platform, cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    previous: dict[tuple[str, str], dict[str, Any]] = {}
    try:
        old = json.loads(path.read_text())
        previous = {(r["feature"], r["impl"]): r for r in old.get("results", [])}
    except (OSError, json.JSONDecodeError, KeyError):
        pass
    for result in results:
        previous[(result["feature"], result["impl"])] = result
    document = {
        "schema": EVIDENCE_SCHEMA,
        "key": platform_key(platform),
        "created": created,
        "libraries": dict(sorted(platform.libraries.items())),
        "results": list(previous.values()),
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(document, indent=2) + "\n")
    tmp.replace(path)  # atomic: a reader never sees half a file
    return path


def evidence_to_json(evidence: Evidence) -> str:
    """A compact form for the wire (the daemon sends it to clients that rebuild a Resolution)."""
    return json.dumps(
        {
            "key": evidence.key,
            "problem": evidence.problem,
            "entries": [
                [feature, impl, e.passed, e.created, e.summary, e.source]
                for (feature, impl), e in sorted(evidence.entries.items())
            ],
        }
    )


def evidence_from_json(text: str) -> Evidence:
    data = json.loads(text)
    entries = {
        (feature, impl): EvidenceEntry(passed, created, summary, source)
        for feature, impl, passed, created, summary, source in data["entries"]
    }
    return Evidence(data["key"], entries, data.get("problem"))
