"""The node's compiled-kernel cache: where ``kernelpolicy warm`` builds the Triton sampler's and
FlashInfer's kernels, and where the workers that ``kernelpolicy exec`` starts find them.

``<cache dir>/kernels/triton`` is Triton's cache (``TRITON_CACHE_DIR``) and
``<cache dir>/kernels/flashinfer`` FlashInfer's JIT workspace (``FLASHINFER_WORKSPACE_BASE``).
A compiled kernel is code, so the cache is trusted under the evidence store's rules: the
directories and every entry in them owned by root or the current user, writable by nobody
else, and no symbolic link anywhere in them. A cache that fails any check is not used (its
variables are not set; the kernels build where they are first needed, in the background) and
the reason is said once. A variable you set yourself is never overwritten.

``<cache dir>/kernels/built`` records the variants built into the cache (:class:`BuiltRecord`):
one file per variant, named by the digest of what makes it that variant (its kernel family,
its key, the library versions and the kernel sources), written by whatever built it with the
cache in use (``warm``, ``verify``, a worker's background build). A worker whose Triton uses a
trusted kernel cache (:func:`record_in_use`) loads a recorded variant in the calling thread,
where it costs a cache read, instead of serving from a fallback while a thread loads it.
``<cache dir>/kernels/index`` keeps, per variant, what its build produced in a form its family
reads back (:meth:`BuiltRecord.write_index`; the Triton sampler's: the compiled kernels, so
that a worker hands them to Triton without Triton's own cache lookup).
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from kernelpolicy.errors import UntrustedFileError
from kernelpolicy.limits import MAX_KERNEL_CACHE_ENTRIES, MAX_KERNEL_INDEX_BYTES
from kernelpolicy.safeio import write_atomic
from kernelpolicy.trust import ancestors_problem, owner_ok, private_dir

KERNELS = "kernels"
# Variable -> the cache's subdirectory it points to.
VARIABLES: dict[str, str] = {
    "TRITON_CACHE_DIR": "triton",
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",
}
BUILT = "built"  # the record of the variants built into the cache
INDEX = "index"  # per variant: what its build produced, read back by its family


def kernel_cache_dir(cache_dir: Path) -> Path:
    """``<cache dir>/kernels``."""
    return cache_dir / KERNELS


def prepare_kernel_cache(cache_dir: Path) -> Path:
    """Create the cache private to this user (0700), with its subdirectories; returns it.

    Raises:
        UntrustedFileError: It exists and belongs to someone else, or is a link; or a directory
            above it could be written by another user (who could swap the cache while engines
            read it), checked before anything is made.
    """
    existing = next(p for p in (cache_dir, *cache_dir.parents) if p.exists())
    problem = ancestors_problem(existing)  # before making anything in it
    if problem is not None:  # a compiled kernel is code: no one else may swap the cache
        raise UntrustedFileError(
            f"refusing kernel cache {kernel_cache_dir(cache_dir)}: {problem}; set "
            f"KERNELPOLICY_CACHE_DIR to a directory that only root or uid {os.geteuid()} can "
            "write, at every level (a Kubernetes emptyDir's root is 0777: chmod it 1777 or "
            "0755 in an init container)"
        )
    root = private_dir(kernel_cache_dir(cache_dir), "kernel cache")
    for name in (*VARIABLES.values(), BUILT):
        private_dir(root / name, "kernel cache")
    return root


def cache_problem(root: Path) -> str | None:
    """Why the kernel cache at ``root`` may not be used, or None: a missing cache, a symbolic
    link, an entry owned by another user or writable by group or others, a directory above it
    that another user could swap it from (:func:`kernelpolicy.trust.ancestors_problem`), or too
    many entries."""
    if not root.is_dir() or root.is_symlink():
        return f"{root}: no kernel cache (run kernelpolicy warm)"
    above = ancestors_problem(root.parent)
    if above is not None:
        return above
    for seen, path in enumerate((root, *_walk(root)), start=1):
        if seen > MAX_KERNEL_CACHE_ENTRIES:
            return f"{root}: over {MAX_KERNEL_CACHE_ENTRIES} entries"
        problem = entry_problem(path, path.lstat())
        if problem is not None:
            return problem
    return None


def entry_problem(path: Path, info: os.stat_result) -> str | None:
    """The kernel cache's rule for one entry, from its ``lstat`` (or the ``fstat`` of what was
    opened): no symbolic link, owned by root or us, writable by nobody else. Stricter than
    :func:`kernelpolicy.trust.owner_mode_problem` on purpose: no sticky-directory allowance,
    since a compiled kernel is code."""
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISLNK(info.st_mode):
        return f"{path}: a symbolic link (it could point anywhere)"
    if not owner_ok(info.st_uid):
        return f"{path}: owned by uid {info.st_uid}, expected root or uid {os.geteuid()}"
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path}: writable by group or others (mode {mode:04o})"
    return None


def _walk(root: Path) -> list[Path]:
    found: list[Path] = []
    for directory, names, files in os.walk(root, followlinks=False):
        found += [Path(directory, n) for n in (*names, *files)]
        if len(found) > MAX_KERNEL_CACHE_ENTRIES:
            break
    return found


def tighten(root: Path) -> int:
    """Take group and other write away from the entries of ours in the cache at ``root``
    (symbolic links left alone): Triton and FlashInfer write with the process's umask, and
    under ``umask 002`` (Ubuntu's default for people) the files they write would make the
    whole cache untrusted for the next worker (:func:`cache_problem`). Returns how many were
    changed; what cannot be changed is left for :func:`cache_problem` to report."""
    changed = 0
    for path in (root, *_walk(root)):
        try:  # through a descriptor: a link put in the entry's place is never followed
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:  # a link, gone meanwhile, or not ours to open
            continue
        try:
            info = os.fstat(fd)
            mode = stat.S_IMODE(info.st_mode)
            if info.st_uid == os.geteuid() and mode & 0o022:
                os.fchmod(fd, mode & ~0o022)
                changed += 1
        except OSError:  # not ours to change: cache_problem says so
            pass
        finally:
            os.close(fd)
    return changed


def cache_environment(
    cache_dir: Path, environ: Mapping[str, str]
) -> tuple[dict[str, str], str | None]:
    """(variables to add, why the cache is not used): the cache's variables that ``environ``
    does not set already, where the cache is trusted."""
    root = kernel_cache_dir(cache_dir)
    problem = cache_problem(root)
    if problem is not None:
        return {}, problem
    wanted = {name: str(root / sub) for name, sub in VARIABLES.items()}
    return {k: v for k, v in wanted.items() if not environ.get(k, "").strip()}, None


class BuiltRecord:
    """The variants built into the kernel cache at ``root`` (``<cache dir>/kernels``), each a
    file in ``built/`` named by the digest of its description (see the module doc)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, text: str) -> Path:
        """Where the variant described by ``text`` is recorded."""
        return self.root / BUILT / hashlib.sha256(text.encode()).hexdigest()

    def has(self, text: str) -> bool:
        """Whether the variant is recorded, by a regular file owned by root or us and writable
        by nobody else (one lstat: this runs on a variant's first call)."""
        path = self.path(text)
        try:
            info = path.lstat()
        except OSError:
            return False
        return stat.S_ISREG(info.st_mode) and entry_problem(path, info) is None

    def add(self, text: str) -> None:
        """Record the variant (its description is the file's content, for people).

        Raises:
            OSError: The record cannot be written (a cache of root's, read by a user).
            UntrustedFileError: ``built/`` is not a private directory of ours.
        """
        directory = private_dir(self.root / BUILT, "kernel cache")
        write_atomic(directory / self.path(text).name, text.encode(), 0o644)
        tighten(self.root)  # what the build just wrote, under the process's umask

    def write_index(self, text: str, data: bytes) -> None:
        """Keep ``data`` as the index of the variant described by ``text``.

        Raises:
            OSError: It cannot be written.
            UntrustedFileError: ``index/`` is not a private directory of ours.
        """
        directory = private_dir(self.root / INDEX, "kernel cache")
        write_atomic(directory / self.path(text).name, data, 0o644)

    def read_index(self, text: str) -> bytes | None:
        """The index of the variant described by ``text``: None unless it is a regular file
        (a link is never followed) owned by root or us, writable by nobody else and within
        ``MAX_KERNEL_INDEX_BYTES``."""
        path = self.root / INDEX / self.path(text).name
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or entry_problem(path, info) is not None:
                return None
            data = os.read(fd, MAX_KERNEL_INDEX_BYTES + 1)
        except OSError:
            return None
        finally:
            os.close(fd)
        return data if len(data) <= MAX_KERNEL_INDEX_BYTES else None


def record_in_use(environ: Mapping[str, str]) -> tuple[BuiltRecord | None, str | None]:
    """(the record of the kernel cache this process's Triton uses, why it is not used): a
    cache is in use when ``TRITON_CACHE_DIR`` is ``<cache dir>/kernels/triton``, and its
    record is used only where the whole cache is trusted (:func:`cache_problem`). (None, None)
    where Triton uses no kernel cache (unset, or a Triton cache of your own)."""
    triton = environ.get("TRITON_CACHE_DIR", "").strip()
    if not triton:
        return None, None
    root = Path(triton).parent
    if Path(triton).name != VARIABLES["TRITON_CACHE_DIR"] or root.name != KERNELS:
        return None, None
    problem = cache_problem(root)
    return (None, problem) if problem is not None else (BuiltRecord(root), None)
