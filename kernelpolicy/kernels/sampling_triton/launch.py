"""The launch sequence of one call (the steps of the package doc), without a host
synchronisation or an allocation that outlives it, so that a CUDA graph can hold it.

The kernels and the tuning constants are read from the package at call time: tests, the GPU
tuning script and the compile check replace them there.
"""

from __future__ import annotations

import math
import sys
from types import ModuleType
from typing import TYPE_CHECKING

import torch
import triton

if TYPE_CHECKING:
    from kernelpolicy.kernels.sampling_triton import _Scratch as Scratch


def _package() -> ModuleType:
    return sys.modules["kernelpolicy.kernels.sampling_triton"]


def launch(
    x: torch.Tensor,
    w: Scratch,
    size: int,
    k_dev: torch.Tensor,
    p_dev: torch.Tensor,
    uniforms: tuple[torch.Tensor, torch.Tensor],
    out: torch.Tensor,
    rows: tuple[bool, bool, bool],
) -> None:
    """The launches of the module doc, without a host synchronisation or an allocation
    that outlives them (so that a CUDA graph can hold them). ``uniforms``: one per row for the
    draw, and the wide rows' proposals. ``rows``: some row has k, some row has p, some row may
    have p without k (only those can need the wide kernels)."""
    groups_pass(x, w, size)
    after_groups(x, w, size, k_dev, p_dev, uniforms, out, rows)


def groups_pass(x: torch.Tensor, w: Scratch, size: int) -> None:
    """Step 1, the full read of the logits: it reads neither k, p nor the uniforms, so a graph
    of it alone can start before the host has copied them (see ``replay.py``)."""
    pkg = _package()
    batch, vocab = x.shape
    groups, tiles = w.groups, w.tiles
    pkg.group_kernel[(batch, tiles)](
        x,
        x.stride(0),
        vocab,
        w.gmax,
        w.gsum,
        2 * groups,
        groups,
        w.counts,
        tiles,
        BLOCK=pkg.GROUP_BLOCK,
        GS=size,
        ONE_REDUCE=pkg.GROUP_ONE_REDUCE,
        num_warps=pkg.GROUP_WARPS,
    )


def after_groups(
    x: torch.Tensor,
    w: Scratch,
    size: int,
    k_dev: torch.Tensor,
    p_dev: torch.Tensor,
    uniforms: tuple[torch.Tensor, torch.Tensor],
    out: torch.Tensor,
    rows: tuple[bool, bool, bool],
) -> None:
    """Steps 2-6, after :func:`groups_pass` (same arguments as :func:`launch`)."""
    pkg = _package()
    has_k, has_p, p_rows = rows
    u, q = uniforms
    batch, vocab = x.shape
    stride, groups, tiles = x.stride(0), w.groups, w.tiles
    flags = {"HAS_K": has_k, "HAS_P": has_p}
    pkg.bounds_kernel[(batch,)](
        w.gmax,
        w.gsum,
        2 * groups,
        groups,
        vocab,
        k_dev,
        p_dev,
        w.mode,
        w.bound,
        w.z,
        w.m,
        TG=pkg.TOP_GROUPS,
        BLOCK=1024,
        FAN=pkg.FAN_BOUND,
        CH=pkg.CHUNK,
        PASSES=pkg.PASSES,
        SLACK=pkg.SLACK,
        num_warps=pkg.BOUNDS_WARPS,
        **flags,
    )
    pkg.select_kernel[(batch, tiles)](
        x,
        stride,
        vocab,
        w.mode,
        w.bound,
        w.gmax,
        2 * groups,
        w.regions,
        w.counts,
        tiles,
        BLOCK=pkg.GROUP_BLOCK,
        GS=size,
        CHUNK=max(min(pkg.SELECT_CHUNK, pkg.GROUP_BLOCK), size),
        R=pkg.REGION,
        num_warps=pkg.SELECT_WARPS,
    )

    def finish(wide: bool) -> None:
        pkg.finish_kernel[(batch,)](
            x,
            stride,
            vocab,
            w.mode,
            w.z,
            w.m,
            w.gmax,
            w.gsum,
            2 * groups,
            groups,
            w.regions,
            w.counts,
            tiles,
            w.dense,
            k_dev,
            p_dev,
            u,
            out,
            w.slow,
            w.bound,
            w.states,
            GS=size,
            TILES=triton.next_power_of_2(tiles),
            R=pkg.REGION,
            SMALL=pkg.SMALL,
            LARGE=pkg.LARGE,
            BLOCK=1024,
            WR=pkg.W_ROUNDS,
            NR=254,
            WIDE=wide,
            num_warps=pkg.FINISH_WARPS_P if p_rows else pkg.FINISH_WARPS,
            **flags,
        )

    wide = p_rows and x.dtype not in pkg.WIDE_FAILED
    finish(wide)
    if wide and pkg.PROPOSALS and x.dtype not in pkg.REJECT_FAILED:
        try:
            _reject(x, w, size, p_dev, q, out)
        except Exception as exc:  # a build failure: the exact wide kernels take every wide row
            pkg.REJECT_FAILED[x.dtype] = f"{type(exc).__name__}: {str(exc)[:300]}"
    if wide:
        try:
            _wide(x, w, p_dev, u, out)
        except Exception as exc:  # a build failure: pkg.row_kernel takes the rows (finish again)
            pkg.WIDE_FAILED[x.dtype] = f"{type(exc).__name__}: {str(exc)[:300]}"
            finish(False)
    pkg.row_kernel[(batch,)](
        x,
        stride,
        vocab,
        w.mode,
        w.bound,
        w.z,
        w.m,
        k_dev,
        p_dev,
        u,
        out,
        w.buffers,
        math.log(vocab),
        slow=w.slow,
        BLOCK=pkg.ROW_BLOCK,
        CAP=pkg.CAP,
        SMALL=pkg.SMALL,
        FAN=pkg.FAN,
        ROUNDS=pkg.ROUNDS,
        num_warps=pkg.ROW_WARPS,
        **flags,
    )


def _reject(
    x: torch.Tensor,
    w: Scratch,
    size: int,
    p_dev: torch.Tensor,
    q: torch.Tensor,
    out: torch.Tensor,
) -> None:
    """The wide rows' proposals, checked against their nucleus in one read (reject.py); the
    rows whose proposals all fall outside stay for the exact wide kernels."""
    pkg = _package()
    batch, vocab = x.shape
    stride, groups, tiles = x.stride(0), w.groups, w.tiles
    pkg.propose_kernel[(batch,)](
        x,
        stride,
        vocab,
        w.slow,
        w.m,
        w.z,
        w.gmax,
        w.gsum,
        2 * groups,
        groups,
        q,
        w.proposals,
        GS=size,
        P=pkg.PROPOSALS,
        PP=triton.next_power_of_2(pkg.PROPOSALS),
        BLOCK=pkg.PROPOSE_BLOCK,
        num_warps=pkg.PROPOSE_WARPS,
    )
    for first, step in reject_steps(pkg.PROPOSALS, pkg.REJECT_FIRST, pkg.REJECT_STEP):
        pkg.reject_tile_kernel[(batch, tiles)](
            x, stride, vocab, w.slow, w.m, w.proposals, w.before, tiles, first,
            P=pkg.PROPOSALS, STEP=step, BLOCK=pkg.GROUP_BLOCK, num_warps=pkg.REJECT_WARPS,
        )  # fmt: skip
        pkg.reject_pick_kernel[(batch,)](
            w.slow, w.z, p_dev, w.proposals, w.before, tiles, out, first, HAS_P=True,
            P=pkg.PROPOSALS, STEP=step, num_warps=1,
        )  # fmt: skip


def reject_steps(proposals: int, first: int, step: int) -> list[tuple[int, int]]:
    """(first proposal, proposals checked) of each step of the proposals' check: ``first``
    proposals, then ``step`` at a time (powers of two, as the kernels' ranges need; a step past
    the last proposal checks only those left)."""
    steps = [(0, first)] if proposals else []
    steps += [(start, step) for start in range(first, proposals, step)]
    return steps


def _wide(
    x: torch.Tensor,
    w: Scratch,
    p_dev: torch.Tensor,
    u: torch.Tensor,
    out: torch.Tensor,
) -> None:
    """The wide kernels (wide.py), for the top-p rows pkg.finish_kernel handed them; every launch
    returns at once for the other rows."""
    pkg = _package()
    batch, vocab = x.shape
    stride, tiles = x.stride(0), w.w_tiles
    pow_tiles = triton.next_power_of_2(tiles)
    tile_grid, rows = (batch, tiles), (batch,)
    sizes = {"BLOCK": pkg.W_BLOCK, "SUB": pkg.W_SUB}
    for depth in range(pkg.W_ROUNDS):
        pkg.wide_tile_kernel[tile_grid](
            x,
            stride,
            vocab,
            w.slow,
            w.m,
            w.states,
            w.hists,
            w.part_above,
            tiles,
            DEPTH=depth,
            R=pkg.W_ROUNDS,
            num_warps=pkg.W_WARPS,
            **sizes,
        )
        pkg.wide_narrow_kernel[rows](
            w.slow,
            w.m,
            w.z,
            p_dev,
            w.states,
            w.hists,
            w.part_above,
            tiles,
            w.n_in,
            w.wide_n,
            HAS_P=True,
            DEPTH=depth,
            R=pkg.W_ROUNDS,
            TILES=pow_tiles,
            CAP=pkg.CAP,
            num_warps=4,
        )
    pkg.wide_compact_kernel[tile_grid](
        x,
        stride,
        vocab,
        w.slow,
        w.m,
        w.states,
        w.buffers,
        w.wide_n,
        w.part_above,
        tiles,
        R=pkg.W_ROUNDS,
        CAP=pkg.CAP,
        num_warps=pkg.W_WARPS,
        **sizes,
    )
    for n, smaller in ((pkg.LARGE, 0), (pkg.CAP, pkg.LARGE)):  # sort LARGE slots where they suffice
        pkg.wide_resolve_kernel[rows](
            w.slow,
            w.m,
            w.z,
            p_dev,
            w.n_in,
            w.buffers,
            w.part_above,
            tiles,
            w.tile_mass,
            w.tile_eq,
            w.thr,
            w.ties,
            HAS_P=True,
            BLOCK=pkg.W_BLOCK,
            N=n,
            SMALLER=smaller,
            CAP=pkg.CAP,
            num_warps=pkg.ROW_WARPS,
        )
    pkg.wide_draw_kernel[rows](
        x,
        stride,
        vocab,
        w.slow,
        w.m,
        w.thr,
        w.ties,
        u,
        w.tile_mass,
        w.tile_eq,
        tiles,
        out,
        TILES=pow_tiles,
        num_warps=pkg.W_WARPS,
        **sizes,
    )
