"""SHA-256 for the cold-start path, without OpenSSL's start-up.

``import hashlib`` loads OpenSSL's ``_hashlib`` (about 2.5 ms of a worker's cold start on the CI
machine); CPython's own built-in SHA-256 gives the same digests and loads in microseconds.
Used where a worker's first ``resolve()`` hashes (the compiled-pack cache key, the fingerprint,
the evidence key, the node identity's HMAC, the rollout buckets); anything else may use
:mod:`hashlib`. (:mod:`hmac` loads ``_hashlib`` too: :func:`hmac_sha256` is RFC 2104 over the
built-in SHA-256.)
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

__all__ = ["file_stamps", "hmac_sha256", "sha256"]


class Hash(Protocol):
    """What kernelpolicy uses of a hash object."""

    def update(self, data: bytes, /) -> None: ...

    def digest(self) -> bytes: ...

    def hexdigest(self) -> str: ...


def _constructor() -> Callable[..., Any]:
    # CPython's module of 3.12+, or of 3.11: only that one is looked for (a failed import
    # searches every entry of sys.path, as long as a worker's path is).
    for module in ("_sha2",) if sys.version_info >= (3, 12) else ("_sha256",):
        try:
            return importlib.import_module(module).sha256  # type: ignore[no-any-return]
        except (ImportError, AttributeError):
            continue
    import hashlib  # another interpreter: the standard library's

    return hashlib.sha256


_SHA256 = _constructor()


def sha256(data: bytes = b"") -> Hash:
    """A SHA-256 object (``update``, ``hexdigest``), as :func:`hashlib.sha256` returns."""
    digest: Hash = _SHA256(data)
    return digest


_BLOCK = 64  # SHA-256's block size in bytes, the HMAC key's padded length
_INNER = bytes(x ^ 0x36 for x in range(256))
_OUTER = bytes(x ^ 0x5C for x in range(256))


def hmac_sha256(key: bytes, message: bytes) -> str:
    """HMAC-SHA256 of ``message`` under ``key`` (RFC 2104), in hex: what
    ``hmac.new(key, message, "sha256").hexdigest()`` returns."""
    if len(key) > _BLOCK:
        key = _SHA256(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    inner = _SHA256(key.translate(_INNER) + message).digest()
    return _SHA256(key.translate(_OUTER) + inner).hexdigest()  # type: ignore[no-any-return]


def file_stamps(root: Path, files: Iterable[Path]) -> str:
    """Each file's path under ``root``, size and modification time, as Python stamps its
    bytecode (a missing file is ``name:-``): what a cache keyed by code compares, so that an
    edit or a reinstall is a miss."""
    stamps = []
    for file in files:
        try:
            info = file.stat()
        except OSError:
            stamps.append(f"{file.name}:-")
            continue
        stamps.append(f"{file.relative_to(root)}:{info.st_size}:{info.st_mtime_ns}")
    return "\0".join(stamps)
