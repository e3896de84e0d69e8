"""The launch sequence of one call (the steps of the package doc), without a host
synchronisation or an allocation that outlives it, so that a CUDA graph can hold it.

Every function takes the sampler (``parts.Launcher``: its kernels, tuning and failure records)
whose kernels it launches; every kernel argument is passed by its name.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import triton

if TYPE_CHECKING:
    from kernelpolicy.kernels.sampling_triton.parts import Launcher
    from kernelpolicy.kernels.sampling_triton.scratch import Scratch

Flags = tuple[bool, bool, bool]
"""Some row has k, some row has p, some row may have p without k (only those can need the
wide kernels)."""


ALIGN = 16
"""Triton specialises a pointer argument on its 16-byte alignment and an int argument on its
divisibility by 16 (and on being 1): a launch that differs there from the build compiles."""


def readable_in_place(x: torch.Tensor) -> bool:
    """Whether the kernels a variant's build compiled read ``x`` where it is: its data pointer
    is 16-byte aligned, its rows are contiguous, and where its vocabulary is a multiple of 16
    so is its row stride. A row stride is never specialised on (:func:`row_stride`), so a view
    of a padded buffer (vLLM's ``logits[:, :vocab]``) is; a view from a row or column inside a
    buffer, or one with strided rows, is not (another specialisation: a compile)."""
    vocab = x.shape[-1]
    aligned = x.data_ptr() % ALIGN == 0
    return aligned and x.stride(-1) == 1 and (vocab % ALIGN != 0 or x.stride(0) % ALIGN == 0)


def servable(x: torch.Tensor) -> torch.Tensor:
    """The logits as the kernels their variant built read them: ``x`` itself where
    :func:`readable_in_place`, else a contiguous copy."""
    return x if readable_in_place(x) else x.clone(memory_format=torch.contiguous_format)


def row_stride(x: torch.Tensor) -> dict[str, int]:
    """The kernels' ``stride`` and ``STRIDE_UNIT`` arguments for the logits ``x``
    (:func:`servable`): the row stride is ``stride * STRIDE_UNIT``, where ``stride`` is not
    specialised (``do_not_specialize``) and ``STRIDE_UNIT`` is 16 for a vocabulary that is a
    multiple of 16, else 1. So every view of one vocabulary launches what its variant's build
    (contiguous rows) launched, and the rows of a multiple-of-16 vocabulary stay known to be
    16-aligned to the compiler, which vectorises their loads as before."""
    unit = ALIGN if x.shape[-1] % ALIGN == 0 else 1
    return {"stride": x.stride(0) // unit, "STRIDE_UNIT": unit}


def launch(
    s: Launcher,
    x: torch.Tensor,
    w: Scratch,
    size: int,
    k_dev: torch.Tensor,
    p_dev: torch.Tensor,
    uniforms: tuple[torch.Tensor, torch.Tensor],
    out: torch.Tensor,
    rows: Flags,
) -> None:
    """The launches of the module doc. ``uniforms``: one per row for the draw, and the wide
    rows' proposals."""
    groups_pass(s, x, w, size)
    after_groups(s, x, w, size, k_dev, p_dev, uniforms, out, rows)


def groups_pass(s: Launcher, x: torch.Tensor, w: Scratch, size: int) -> None:
    """Step 1, the full read of the logits: it reads neither k, p nor the uniforms, so a graph
    of it alone can start before the host has copied them (see ``replay.py``)."""
    t = s.tuning
    batch, vocab = x.shape
    s.kernels.group_kernel[(batch, w.tiles)](
        logits=x, **row_stride(x), V=vocab, gmax=w.gmax, gsum=w.gsum,
        g_stride=2 * w.groups, G=w.groups, counts=w.counts, n_tiles=w.tiles,
        BLOCK=t.group_block, GS=size, ONE_REDUCE=t.group_one_reduce, num_warps=t.group_warps,
    )  # fmt: skip


def _bounds_and_select(
    s: Launcher, x: torch.Tensor, w: Scratch, size: int, k_dev: torch.Tensor, p_dev: torch.Tensor,
    flags: dict[str, bool],
) -> None:  # fmt: skip
    """Steps 2 and 3: each row's bound, then the candidates at or above it."""
    t, kn = s.tuning, s.kernels
    batch, vocab = x.shape
    kn.bounds_kernel[(batch,)](
        gmax=w.gmax, gsum=w.gsum, g_stride=2 * w.groups, G=w.groups, V=vocab, k_ptr=k_dev,
        p_ptr=p_dev, mode_ptr=w.mode, bound_ptr=w.bound, z_ptr=w.z, m_ptr=w.m,
        TG=t.top_groups, BLOCK=1024, FAN=t.fan_bound, CH=t.chunk, PASSES=t.passes,
        SLACK=t.slack, num_warps=t.bounds_warps, **flags,
    )  # fmt: skip
    kn.select_kernel[(batch, w.tiles)](
        logits=x, **row_stride(x), V=vocab, mode_ptr=w.mode, bound_ptr=w.bound,
        gmax=w.gmax, g_stride=2 * w.groups, regions=w.regions, counts=w.counts,
        n_tiles=w.tiles, BLOCK=t.group_block, GS=size,
        CHUNK=max(min(t.select_chunk, t.group_block), size), R=t.region,
        num_warps=t.select_warps,
    )  # fmt: skip


def _finish(
    s: Launcher, x: torch.Tensor, w: Scratch, size: int, k_dev: torch.Tensor, p_dev: torch.Tensor,
    u: torch.Tensor, out: torch.Tensor, flags: dict[str, bool], wide: bool, p_rows: bool,
) -> None:  # fmt: skip
    """Step 4: sort and draw each row's candidates, or flag the row for the slower paths."""
    t = s.tuning
    batch, vocab = x.shape
    s.kernels.finish_kernel[(batch,)](
        logits=x, **row_stride(x), V=vocab, mode_ptr=w.mode, z_ptr=w.z, m_ptr=w.m,
        gmax=w.gmax, gsum=w.gsum, g_stride=2 * w.groups, G=w.groups, regions=w.regions,
        counts=w.counts, n_tiles=w.tiles, dense=w.dense, k_ptr=k_dev, p_ptr=p_dev, u_ptr=u,
        out=out, slow=w.slow, bound_ptr=w.bound, states=w.states, GS=size,
        TILES=triton.next_power_of_2(w.tiles), R=t.region, SMALL=t.small, LARGE=t.large,
        BLOCK=1024, WR=t.w_rounds, NR=254, WIDE=wide,
        num_warps=t.finish_warps_p if p_rows else t.finish_warps, **flags,
    )  # fmt: skip


def after_groups(
    s: Launcher,
    x: torch.Tensor,
    w: Scratch,
    size: int,
    k_dev: torch.Tensor,
    p_dev: torch.Tensor,
    uniforms: tuple[torch.Tensor, torch.Tensor],
    out: torch.Tensor,
    rows: Flags,
) -> None:
    """Steps 2-6, after :func:`groups_pass` (same arguments as :func:`launch`)."""
    t, failures = s.tuning, s.failures
    has_k, has_p, p_rows = rows
    u, q = uniforms
    flags = {"HAS_K": has_k, "HAS_P": has_p}
    _bounds_and_select(s, x, w, size, k_dev, p_dev, flags)
    wide = p_rows and x.dtype not in failures.wide_failed
    _finish(s, x, w, size, k_dev, p_dev, u, out, flags, wide, p_rows)
    if wide and t.proposals and x.dtype not in failures.reject_failed:
        try:
            _reject(s, x, w, size, p_dev, q, out)
        except Exception as exc:  # a build failure: the exact wide kernels take every wide row
            failures.reject_failed[x.dtype] = f"{type(exc).__name__}: {str(exc)[:300]}"
    if wide:
        try:
            _wide(s, x, w, p_dev, u, out)
        except Exception as exc:  # a build failure: row_kernel takes the rows (finish again)
            failures.wide_failed[x.dtype] = f"{type(exc).__name__}: {str(exc)[:300]}"
            _finish(s, x, w, size, k_dev, p_dev, u, out, flags, False, p_rows)
    batch, vocab = x.shape
    s.kernels.row_kernel[(batch,)](
        logits=x, **row_stride(x), V=vocab, mode_ptr=w.mode, bound_ptr=w.bound, z_ptr=w.z,
        m_ptr=w.m, k_ptr=k_dev, p_ptr=p_dev, u_ptr=u, out=out, buffers=w.buffers,
        log_v=math.log(vocab), slow=w.slow, BLOCK=t.row_block, CAP=t.cap, SMALL=t.small,
        FAN=t.fan, ROUNDS=t.rounds, num_warps=t.row_warps, **flags,
    )  # fmt: skip


def _reject(
    s: Launcher,
    x: torch.Tensor,
    w: Scratch,
    size: int,
    p_dev: torch.Tensor,
    q: torch.Tensor,
    out: torch.Tensor,
) -> None:
    """The wide rows' proposals, checked against their nucleus in one read (reject.py); the
    rows whose proposals all fall outside stay for the exact wide kernels."""
    t, kn = s.tuning, s.kernels
    batch, vocab = x.shape
    at, tiles = row_stride(x), w.tiles
    kn.propose_kernel[(batch,)](
        logits=x, **at, V=vocab, slow=w.slow, m_ptr=w.m, z_ptr=w.z, gmax=w.gmax,
        gsum=w.gsum, g_stride=2 * w.groups, G=w.groups, q_ptr=q, proposals=w.proposals,
        GS=size, P=t.proposals, PP=triton.next_power_of_2(t.proposals), BLOCK=t.propose_block,
        num_warps=t.propose_warps,
    )  # fmt: skip
    for first, step in reject_steps(t.proposals, t.reject_first, t.reject_step):
        kn.reject_tile_kernel[(batch, tiles)](
            logits=x, **at, V=vocab, slow=w.slow, m_ptr=w.m, proposals=w.proposals,
            before=w.before, n_tiles=tiles, first=first, P=t.proposals, STEP=step,
            BLOCK=t.group_block, num_warps=t.reject_warps,
        )  # fmt: skip
        kn.reject_pick_kernel[(batch,)](
            slow=w.slow, z_ptr=w.z, p_ptr=p_dev, proposals=w.proposals, before=w.before,
            n_tiles=tiles, out=out, first=first, HAS_P=True, P=t.proposals, STEP=step,
            num_warps=1,
        )  # fmt: skip


def reject_steps(proposals: int, first: int, step: int) -> list[tuple[int, int]]:
    """(first proposal, proposals checked) of each step of the proposals' check: ``first``
    proposals, then ``step`` at a time (powers of two, as the kernels' ranges need; a step past
    the last proposal checks only those left)."""
    steps = [(0, first)] if proposals else []
    steps += [(start, step) for start in range(first, proposals, step)]
    return steps


def _wide(
    s: Launcher,
    x: torch.Tensor,
    w: Scratch,
    p_dev: torch.Tensor,
    u: torch.Tensor,
    out: torch.Tensor,
) -> None:
    """The wide kernels (wide.py), for the top-p rows finish_kernel handed them; every launch
    returns at once for the other rows."""
    t, kn = s.tuning, s.kernels
    batch, vocab = x.shape
    at, tiles = row_stride(x), w.w_tiles
    pow_tiles = triton.next_power_of_2(tiles)
    tile_grid, rows = (batch, tiles), (batch,)
    sizes = {"BLOCK": t.w_block, "SUB": t.w_sub}
    for depth in range(t.w_rounds):
        kn.wide_tile_kernel[tile_grid](
            logits=x, **at, V=vocab, slow=w.slow, m_ptr=w.m, states=w.states,
            hists=w.hists, part_above=w.part_above, n_tiles=tiles, DEPTH=depth, R=t.w_rounds,
            num_warps=t.w_warps, **sizes,
        )  # fmt: skip
        kn.wide_narrow_kernel[rows](
            slow=w.slow, m_ptr=w.m, z_ptr=w.z, p_ptr=p_dev, states=w.states, hists=w.hists,
            part_above=w.part_above, n_tiles=tiles, n_ptr=w.n_in, wide_n=w.wide_n, HAS_P=True,
            DEPTH=depth, R=t.w_rounds, TILES=pow_tiles, CAP=t.cap, num_warps=4,
        )  # fmt: skip
    kn.wide_compact_kernel[tile_grid](
        logits=x, **at, V=vocab, slow=w.slow, m_ptr=w.m, states=w.states,
        buffers=w.buffers, wide_n=w.wide_n, part_above=w.part_above, n_tiles=tiles,
        R=t.w_rounds, CAP=t.cap, num_warps=t.w_warps, **sizes,
    )  # fmt: skip
    for n, smaller in ((t.large, 0), (t.cap, t.large)):  # sort LARGE slots where they suffice
        kn.wide_resolve_kernel[rows](
            slow=w.slow, m_ptr=w.m, z_ptr=w.z, p_ptr=p_dev, n_ptr=w.n_in, buffers=w.buffers,
            part_above=w.part_above, n_tiles=tiles, tile_mass=w.tile_mass, tile_eq=w.tile_eq,
            thr_ptr=w.thr, ties_ptr=w.ties, HAS_P=True, BLOCK=t.w_block, N=n, SMALLER=smaller,
            CAP=t.cap, num_warps=t.row_warps,
        )  # fmt: skip
    kn.wide_draw_kernel[rows](
        logits=x, **at, V=vocab, slow=w.slow, m_ptr=w.m, thr_ptr=w.thr, ties_ptr=w.ties,
        u_ptr=u, tile_mass=w.tile_mass, tile_eq=w.tile_eq, n_tiles=tiles, out=out,
        TILES=pow_tiles, num_warps=t.w_warps, **sizes,
    )  # fmt: skip
