"""Which way one call of the sampler runs: eagerly, or by which CUDA graph (its cache key),
from the call's shape and the addresses of its logits, k and p. The rules are
``graphs.plan``'s; this counts the call shapes and addresses seen, and caps the in-place
graphs of small logits.

The sampler's graph cache and its tuning (``params_in_place``, ``in_place_captures``) are
passed in (``parts.GraphHost``): each sampler has its own.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import torch

from kernelpolicy.kernels.sampling_triton import graphs
from kernelpolicy.kernels.sampling_triton.launch import readable_in_place

if TYPE_CHECKING:
    from kernelpolicy.kernels.sampling_triton.parts import GraphHost


def plan(
    s: GraphHost,
    shape: tuple[object, ...],
    x: torch.Tensor,
    k_rows: torch.Tensor | None,
    p: torch.Tensor | None,
    seeded: bool,
) -> tuple[graphs.Mode, tuple[object, ...], tuple[int, int], tuple[int, int]]:
    """How a call of ``shape`` runs (``graphs.plan``), its graph's key (the shape, and for an
    ``IN_PLACE`` graph the logits' address), and k's and p's addresses as :func:`sighting` gives
    them (0 and 0 unless ``IN_PLACE``: a ``COPY`` graph reads its own buffers)."""
    nbytes = x.numel() * x.element_size()
    # read in place only as the variant's build read its logits (a graph captured on another
    # alignment would compile its kernels in the capture); else the shape's COPY graph serves
    dense = readable_in_place(x)
    sightings, at, where, params = 0, (0, 0), (0, 0), (0, 0)
    small = nbytes <= graphs.COPY_BYTES
    shape_sightings = 0
    if small:  # a shape's copying graph serves every address: counted once the graph is there
        cached = s.graphs.cached(shape)
        shape_sightings = graphs.POINTER_SIGHTINGS if cached else s.graphs.sighting(shape)
    if dense:
        sightings, at, where, params = sighting(s, shape, x, k_rows, p)
        here = (*shape, *at)
        if s.graphs.cached(here):  # a graph reads this address, whatever the sightings say
            sightings = max(sightings, graphs.POINTER_SIGHTINGS)
        elif small and (
            s.graphs.failure(here) is not None
            or not s.graphs.may_capture_in_place(shape, s.tuning.in_place_captures)
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
    s: GraphHost,
    key: tuple[object, ...],
    x: torch.Tensor,
    k_rows: torch.Tensor | None,
    p: torch.Tensor | None,
) -> tuple[int, tuple[int, int], tuple[int, int], tuple[int, int]]:
    """Count a call at the address of its logits, and at theirs with k's and p's where those
    qualify to be read in place too (``graphs.params_in_place``). Returns the logits' count,
    their address and row stride, where k and p qualify (their addresses, else 0), and the
    addresses of those that have also been seen with these logits before (else 0: a new graph
    copies them).

    A cached graph serves the call while it reads in place only parameters that are still
    where it was captured (``graphs.serves``), whatever the sightings now remember; one that
    reads k or p elsewhere is replaced, once, by one that copies them (``Sampler._pipeline``):
    parameters that move cost a copy per call, never a capture per call."""
    at = (x.data_ptr(), x.stride(0))
    sightings = s.graphs.sighting((*key, *at))
    where = params = (0, 0)
    if s.tuning.params_in_place:
        where = graphs.params_in_place(x, (k_rows, None), (p, torch.float32))
        seen = any(where) and s.graphs.sighting((*key, *at, *where)) >= graphs.POINTER_SIGHTINGS
        params = where if seen else (0, 0)
    return sightings, at, where, params
