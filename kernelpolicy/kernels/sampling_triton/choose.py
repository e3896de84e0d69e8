"""Which way one call of the sampler runs: eagerly, or by which CUDA graph (its cache key),
from the call's shape and the addresses of its logits, k and p. The rules are
``graphs.plan``'s; this counts the call shapes and addresses seen, and caps the in-place
graphs of small logits.

The package's ``GRAPHS``, ``PARAMS_IN_PLACE`` and ``IN_PLACE_CAPTURES`` are read at call time,
where the tests and ``scripts/gpu_profile_samplers.py --versus`` replace them.
"""

from __future__ import annotations

import os
import sys
from types import ModuleType

import torch

from kernelpolicy.kernels.sampling_triton import graphs


def _package() -> ModuleType:
    return sys.modules["kernelpolicy.kernels.sampling_triton"]


def plan(
    shape: tuple[object, ...],
    x: torch.Tensor,
    k_rows: torch.Tensor | None,
    p: torch.Tensor | None,
    seeded: bool,
) -> tuple[graphs.Mode, tuple[object, ...], tuple[int, int], tuple[int, int]]:
    """How a call of ``shape`` runs (``graphs.plan``), its graph's key (the shape, and for an
    ``IN_PLACE`` graph the logits' address), and k's and p's addresses as :func:`sighting` gives
    them (0 and 0 unless ``IN_PLACE``: a ``COPY`` graph reads its own buffers)."""
    pkg = _package()
    nbytes = x.numel() * x.element_size()
    dense = x.stride(-1) == 1
    sightings, at, where, params = 0, (0, 0), (0, 0), (0, 0)
    small = nbytes <= graphs.COPY_BYTES
    shape_sightings = 0
    if small:  # a shape's copying graph serves every address: counted once the graph is there
        cached = pkg.GRAPHS.cached(shape)
        shape_sightings = graphs.POINTER_SIGHTINGS if cached else pkg.GRAPHS.sighting(shape)
    if dense:
        sightings, at, where, params = sighting(shape, x, k_rows, p)
        here = (*shape, *at)
        if pkg.GRAPHS.cached(here):  # a graph reads this address, whatever the sightings say
            sightings = max(sightings, graphs.POINTER_SIGHTINGS)
        elif small and (
            pkg.GRAPHS.failure(here) is not None
            or not pkg.GRAPHS.may_capture_in_place(shape, pkg.IN_PLACE_CAPTURES)
        ):
            sightings = 0  # this address failed its capture, or the shape spent its share:
            # the shape's COPY graph serves it
    mode = graphs.plan(
        device_type=x.device.type,
        interpreted=os.environ.get("TRITON_INTERPRET") == "1",
        capturing=x.device.type == "cuda" and torch.cuda.is_current_stream_capturing(),
        seeded=seeded,
        rows=x.shape[0],
        nbytes=nbytes,
        dense=dense,
        sightings=sightings,
        shape_sightings=shape_sightings,
    )
    if mode is graphs.Mode.IN_PLACE:
        return mode, (*shape, *at), where, params
    return mode, shape, (0, 0), (0, 0)


def sighting(
    key: tuple[object, ...], x: torch.Tensor, k_rows: torch.Tensor | None, p: torch.Tensor | None
) -> tuple[int, tuple[int, int], tuple[int, int], tuple[int, int]]:
    """Count a call at the address of its logits, and at theirs with k's and p's where those
    qualify to be read in place too (``graphs.params_in_place``). Returns the logits' count,
    their address and row stride, where k and p qualify (their addresses, else 0), and the
    addresses of those that have also been seen with these logits before (else 0: a new graph
    copies them).

    A cached graph serves the call while it reads in place only parameters that are still
    where it was captured (``graphs.serves``), whatever the sightings now remember; one that
    reads k or p elsewhere is replaced, once, by one that copies them (the package's ``_pipeline``):
    parameters that move cost a copy per call, never a capture per call."""
    pkg = _package()
    at = (x.data_ptr(), x.stride(0))
    sightings = pkg.GRAPHS.sighting((*key, *at))
    where = params = (0, 0)
    if pkg.PARAMS_IN_PLACE:
        where = graphs.params_in_place(x, (k_rows, None), (p, torch.float32))
        seen = any(where) and pkg.GRAPHS.sighting((*key, *at, *where)) >= graphs.POINTER_SIGHTINGS
        params = where if seen else (0, 0)
    return sightings, at, where, params
