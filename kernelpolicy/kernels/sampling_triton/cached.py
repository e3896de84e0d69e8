"""Which of a sampler's variants the node's kernel cache holds (``kernelpolicy warm`` built them
there): the sampler's :class:`~kernelpolicy.kernels.builds.Cached`.

A variant is recorded (``kernel_cache.BuiltRecord``) under a description of everything Triton's
own cache key depends on that a process can know without compiling: the variant (dtypes, paths,
vocabulary, group size), the device's kind (name and compute capability, not its index: a
worker on ``cuda:3`` reads what warm built on ``cuda:0``), the sampler's tuning (the kernels'
constants), the kernel sources, the Triton and torch versions, and what Triton's key reads from
the process (:func:`triton_environment`: its cache-invalidating environment variables, the
variables its compile options and ptxas come from, the ptxas binaries and libtriton's build).
A change to any of them is a miss, so a recorded variant is one whose kernels Triton finds in
its cache: its build costs a cache read. Only a sampler with the package's own kernels (not a
test's spies) is recorded.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import triton

from kernelpolicy.kernels.sampling_triton import preload
from kernelpolicy.kernels.sampling_triton.jit import Kernels
from kernelpolicy.kernels.sampling_triton.tuning import Tuning
from kernelpolicy.kernels.sampling_triton.variants import Variant

if TYPE_CHECKING:
    from kernelpolicy.kernel_cache import BuiltRecord

FAMILY = "triton sampler"
OPTIONS_ENV = ("PTXAS_OPTIONS", "TRITON_LIBDEVICE_PATH", "TRITON_MOCK_PTX_VERSION")
"""Variables in Triton's key that are not among its cache-invalidating ones: its compile
options' hash holds ``PTXAS_OPTIONS`` and the libdevice file's digest, its CUDA backend's hash
the ptxas version, which ``TRITON_MOCK_PTX_VERSION`` replaces (triton 3.9:
``triton/knobs.py`` ``nvidia_knobs``, ``triton/backends/nvidia/compiler.py`` ``CUDAOptions``,
``get_ptxas_version``)."""
PTXAS_ENV = {"ptxas": "TRITON_PTXAS_PATH", "ptxas-blackwell": "TRITON_PTXAS_BLACKWELL_PATH"}
"""The ptxas binaries Triton runs (``ptxas-blackwell`` from sm90 on) -> the variable naming
another; Triton falls back to the one in its package (``knobs.env_nvidia_tool``)."""


@functools.cache
def sources_digest() -> str:
    """The digest of the package's Python sources (the kernels and what launches them)."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


@functools.cache
def device_kind(device: str) -> str:
    """``NVIDIA H100 80GB HBM3 sm90`` for a CUDA device, else its type (``cpu``)."""
    where = torch.device(device)
    if where.type != "cuda":
        return where.type
    properties = torch.cuda.get_device_properties(where)
    return f"{properties.name} sm{properties.major}{properties.minor}"


def triton_environment() -> dict[str, object]:
    """What Triton's own cache key (``triton/runtime/cache.py`` ``get_cache_key``) reads from
    this process beyond the kernel and its version, as cheaply as a first call allows (no
    file is read, no tool run):

    - its cache-invalidating environment variables, those set (``get_cache_invalidating_env_vars``
      of ``triton/_C/libtriton``, which ``triton/compiler/compiler.py`` hashes into every key);
    - :data:`OPTIONS_ENV`;
    - the ptxas binaries (:data:`PTXAS_ENV`) and the libdevice file named, by path, size and
      modification time: the ptxas version (a CUDA toolkit) is in the backend's hash, but
      asking it means running ptxas;
    - libtriton's build (its size and modification time; Triton hashes the whole file).
    """
    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    named = (*PTXAS_ENV.values(), "TRITON_LIBDEVICE_PATH")
    files = [str(bundled / name) for name in PTXAS_ENV]
    files += [os.environ[name] for name in named if name in os.environ]
    return {
        "invalidating": _invalidating_env(),
        "options": {name: os.environ[name] for name in OPTIONS_ENV if name in os.environ},
        "files": [_stamp(file) for file in files],
        "libtriton": preload.library_stamp(),
    }


def _invalidating_env() -> dict[str, str] | None:
    """Triton's cache-invalidating variables that are set, by the list libtriton keeps (None:
    a Triton without it, whose version in the key stands for it)."""
    try:
        from triton._C.libtriton import get_cache_invalidating_env_vars
    except ImportError:
        return None
    return dict(sorted(get_cache_invalidating_env_vars().items()))


def _stamp(path: str) -> str:
    """``path``'s size and modification time (``-``: nothing there)."""
    try:
        info = os.stat(path)
    except OSError:
        return f"{path}:-"
    return f"{path}:{info.st_size}:{info.st_mtime_ns}"


def describe(tuning: Tuning, variant: Variant) -> str:
    """What the variant is recorded under (JSON, stable: sorted keys)."""
    has_k, has_p, p_rows = variant.rows
    return json.dumps(
        {
            "family": FAMILY,
            "device": device_kind(variant.device),
            "dtype": str(variant.dtype),
            "k_dtype": str(variant.k_dtype),
            "rows": [has_k, has_p, p_rows],
            "vocab": variant.vocab,
            "size": variant.size,
            "tuning": repr(tuning),
            "sources": sources_digest(),
            "triton": triton.__version__,
            "triton_environment": triton_environment(),
            "torch": torch.__version__,
            "interpreted": os.environ.get("TRITON_INTERPRET", ""),
        },
        sort_keys=True,
    )


class CachedVariants:
    """The variants of one sampler the kernel cache holds, and their kept compiled kernels
    (``preload.py``).

    Args:
        tuning: The sampler's tuning.
        kernels: The sampler's kernels: only the package's own are looked up and recorded.
        record: The kernel cache's record, or None where no trusted one is in use
            (``cache_lookup.kernel_cache``, found once per process).

    Attributes:
        produced: Variant -> the compiled kernels its build added (``build_variant`` fills it
            on CUDA); :meth:`add` keeps them as the variant's index.
    """

    def __init__(
        self,
        tuning: Tuning,
        kernels: Kernels,
        record: Callable[[], BuiltRecord | None],
    ) -> None:
        self._tuning = tuning
        self._kernels = kernels
        self._own = kernels == Kernels()
        self._record = record
        self.produced: dict[Variant, list[dict[str, Any]]] = {}

    def has(self, variant: Variant) -> bool:
        record = self._record() if self._own else None
        return record is not None and record.has(describe(self._tuning, variant))

    def add(self, variant: Variant) -> None:
        record = self._record() if self._own else None
        produced = self.produced.pop(variant, [])
        if record is not None:
            text = describe(self._tuning, variant)
            record.add(text)
            preload.keep(record, text, produced)

    def load(self, variant: Variant) -> list[tuple[str, str]]:
        """Hand Triton the variant's kept kernels (on the current CUDA device); which."""
        record = self._record() if self._own else None
        if record is None:
            return []
        return preload.load(record, describe(self._tuning, variant), self._kernels)
