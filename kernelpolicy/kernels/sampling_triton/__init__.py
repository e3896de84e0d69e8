"""Sort-free top-k/top-p sampling in Triton: the ``triton`` implementation (CUDA).

The sampler contract (:class:`kernelpolicy.kernels.TopKTopP`), built so that the logits are
read about twice and nothing is sorted at vocabulary size. Per call:

1. ``group_kernel`` (2-D grid): the maximum, the second maximum and the softmax sum of every
   group of ``GS`` logits.
2. ``bounds_kernel`` (per row, ``bounds.py``): a lower bound of the candidates, searched over
   the group values with no sort. Top-k: at or below the k-th largest group value, so that the
   exact top-k is among the logits ``>=`` it and fewer than ``(k - 1 + SLACK) * GS`` logits lie
   above it. Top-p: at or below the first group values whose own mass reaches ``p`` (each is a
   logit, so the nucleus lies above the last of them).
3. ``select_kernel`` (2-D grid): every logit ``>=`` the bound, packed with its token id into a
   64-bit key, goes to its tile's slots. Only the groups whose maximum reaches the bound are
   read (chunks of ``SELECT_CHUNK`` logits without one are skipped), a few percent of the row.
4. ``finish_kernel`` (per row): sorts the few candidates by key (logit, then lower token id),
   applies top-k, then top-p (over the row's whole softmax, or the top-k's own), and draws by
   inverse CDF with one uniform per row. A row with neither k nor p draws a group by its mass,
   then a token inside it.
5. The wide rows (only when some row may have p without k): the top-p rows step 4 could not
   finish (a nucleus wider than its candidate buffer) first propose ``PROPOSALS`` tokens from
   their whole softmax and keep the first inside the nucleus (``reject.py``, one read of the
   row, exact by rejection); the few with none inside narrow their boundary with histograms
   over (row, tile) grids and resolve it exactly (``wide.py``, three reads of the row).
6. ``row_kernel`` (per row, rows flagged by steps 4-5 only): top-k rows with many tied logits
   or candidates crowded into one tile, and top-p rows the wide kernels could not narrow (a
   tied group wider than their buffer). It searches the nucleus threshold exactly (``FAN``
   thresholds per pass over the row until the logits in the last interval fit a buffer), so no
   row is ever truncated to a fixed candidate count; it is the slow path (one SM reads the row
   several times).

The host side is a :class:`Sampler` (``sampler.py``): its frozen :class:`Tuning` (tiles,
buffers, warps), its kernels, and what it builds while serving. The module's ``top_k_top_p``
calls the process's :data:`DEFAULT` sampler, building a variant inline on its first call; its
``nonblocking`` form, which the engine uses, builds it in the background instead and lets
another implementation serve meanwhile (``variants.py``, :mod:`kernelpolicy.kernels.builds`).

Launched eagerly, that is five to twelve Triton launches and a few torch ops per call,
several hundred microseconds of Python; on CUDA the launches are captured into a CUDA graph per
call shape once it repeats and replayed after (``graphs``: which calls may, what a graph bakes
in, the bounded cache; ``choose``: the shapes and addresses seen, and which graph a call replays;
``replay``: a captured shape, whose group pass starts before the host's copies for large
logits). Calls with per-row generators run eagerly.

NaN logits are never drawn; ``+inf`` logits share all the mass; a row with nothing finite
gives token 0. Ties at the top-k boundary keep the lowest token ids. Seeded rows draw their
uniform from their own generator, so a seeded request gets the same token whatever else is in
the batch (not the same token as the torch implementation).
"""

from __future__ import annotations

import contextlib

import torch

from kernelpolicy.kernels import top_k_top_p_entry
from kernelpolicy.kernels.sampling_triton import jit, variants
from kernelpolicy.kernels.sampling_triton.draws import Draws
from kernelpolicy.kernels.sampling_triton.failures import (
    CAPTURE_FAILED,
    DEGRADATIONS,
    PROCESS,
    REJECT_FAILED,
    UPCAST,
    WIDE_FAILED,
)
from kernelpolicy.kernels.sampling_triton.jit import Kernels
from kernelpolicy.kernels.sampling_triton.sampler import Sampler
from kernelpolicy.kernels.sampling_triton.tuning import Tuning
from kernelpolicy.kernels.sampling_triton.variants import Variant
from kernelpolicy.kernels.torch_impl import Generators

__all__ = [
    "CAPTURE_FAILED",
    "DEFAULT",
    "DEGRADATIONS",
    "GRAPHS",
    "REJECT_FAILED",
    "UPCAST",
    "WIDE_FAILED",
    "Draws",
    "Kernels",
    "Sampler",
    "Tuning",
    "Variant",
    "prefetch",
    "top_k_top_p",
    "variants_of",
    "warm",
]

DEFAULT = Sampler(failures=PROCESS)
"""The process's sampler: ``top_k_top_p`` and the engine's ``triton`` implementation."""
GRAPHS = DEFAULT.graphs
"""The default sampler's CUDA graphs (scripts report them)."""


@top_k_top_p_entry
def top_k_top_p(
    logits: torch.Tensor,
    k: torch.Tensor | None,
    p: torch.Tensor | None,
    generators: Generators = None,
    *,
    k_max: int | None = None,
) -> torch.Tensor:
    """Sample one token per row after top-k and then top-p filtering, with :data:`DEFAULT`
    (see :meth:`Sampler.__call__`); a variant not built yet is built inline."""
    return DEFAULT(logits, k, p, generators, k_max=k_max)


# The engine's serving form (kernelpolicy.kernels.builds.nonblocking_form): a variant not built
# yet builds in the background while another implementation serves its calls.
top_k_top_p.nonblocking = top_k_top_p_entry(DEFAULT.nonblocking)  # type: ignore[attr-defined]  # read by getattr


def prefetch() -> None:
    """Triton's per-process set-up before a first call, on a background thread at ``impl()``
    (``engine.loading.LazyEntry.prefetch``): the hash of its own installation
    (``triton_key()``, cached per process; 0.36-0.5 s on the lent H100) that every cache
    lookup needs, and each of the default sampler's kernels' source hash (``cache_key``, a
    walk of its syntax tree, cached per kernel; 44 ms for the five of a call); and the look
    for the kernel cache (``cache_lookup.kernel_cache``, a walk of up to
    ``MAX_KERNEL_CACHE_ENTRIES`` entries), which no call makes: a call that finds it not made
    yet is served elsewhere; and Triton's first specialisation of an argument."""
    import importlib

    from kernelpolicy.kernels.cache_lookup import kernel_cache

    kernel_cache()

    for module in ("triton.compiler.compiler", "triton.runtime.cache"):
        try:
            key = getattr(importlib.import_module(module), "triton_key", None)
        except ImportError:
            continue
        if callable(key):
            key()
            break
    for name in jit.names():
        getattr(getattr(DEFAULT.kernels, name), "cache_key", None)  # computed once, kept
    _first_specialisation()


def _first_specialisation() -> None:
    """Triton's first specialisation of a launch's tensor argument, which imports its Gluon
    language modules and its code generator (159 ms in a first launch on the H100, 2026-11-27,
    benchmarks/README.md "The stall at the load, broken down"): made here on a CPU tensor, so
    that a build's load does not make it while calls are served. No CUDA is initialised."""
    try:
        from triton.runtime.jit import mangle_type
    except ImportError:  # another Triton: its first launch pays whatever it pays
        return
    with contextlib.suppress(Exception):  # an optimisation only: a failure changes no call
        mangle_type(torch.empty(16))


top_k_top_p.prefetch = prefetch  # type: ignore[attr-defined]  # read by getattr


def variants_of(
    dtypes: list[torch.dtype], vocabs: list[int], *, device: str = "cuda:0"
) -> list[Variant]:
    """The variants of :data:`DEFAULT` a model's calls can need (``variants.of``)."""
    return variants.of(DEFAULT.tuning, dtypes, vocabs, device=device)


def warm(wanted: list[Variant]) -> dict[Variant, str]:
    """Build these variants of :data:`DEFAULT` now (``Sampler.warm``); returns the failures."""
    return DEFAULT.warm(wanted)
