"""The wide nucleus across the whole GPU: top-p rows whose nucleus is too wide for the fast
path's candidate buffer (finish_kernel marks them ``slow == WIDE``).

Instead of one program reading its row several times (row_kernel), every pass is a 2-D grid of
(row, tile) programs:

1. ``wide_tile_kernel``: per tile, the softmax mass and count of the logits at or above each of
   ``FAN`` thresholds spread over the row's interval ``[lo, hi)``, and the mass above ``hi``.
2. ``wide_narrow_kernel`` (per row): the tiles' sums, in tile order, give the interval between
   two thresholds that holds the nucleus boundary; repeated for a fixed number of rounds (a
   fixed launch sequence, so a CUDA graph can hold it) until the interval holds at most ``CAP``
   logits (``slow == READY``).
3. ``wide_compact_kernel``: the logits inside the interval, packed with their ids.
4. ``wide_resolve_kernel`` (per row): sorts them and finds the exact boundary: the threshold and
   how many logits equal to it stay (the lowest ids), as row_kernel does.
5. ``wide_mass_kernel`` and ``wide_draw_kernel``: the kept mass of every tile, then per row the
   tile by inverse CDF and the token inside it, in token order.

A row whose interval still holds more than ``CAP`` logits after the rounds (a tied group wider
than the buffer) goes back to row_kernel (``slow == ROW``), which is exact for any row.
"""

import triton
import triton.language as tl

from kernelpolicy.kernels.sampling_triton.common import exp_at, load_row, pack
from kernelpolicy.kernels.sampling_triton.row import cut

ROW = tl.constexpr(1)  # row_kernel takes the row
WIDE = tl.constexpr(2)  # the interval is being narrowed
READY = tl.constexpr(3)  # the interval fits CAP: compact, resolve, draw


@triton.jit
def _thresholds(lo, hi, FAN: tl.constexpr):
    """FAN thresholds from lo up, evenly spaced below hi (computed alike in every kernel)."""
    return lo + (hi - lo) * tl.arange(0, FAN).to(tl.float32) / FAN


@triton.jit
def wide_tile_kernel(
    logits, stride, V, slow, top_groups, tg_stride, lo_ptr, hi_ptr, parts, part_n, part_above,
    n_tiles, BLOCK: tl.constexpr, SUB: tl.constexpr, FAN: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1)
    if tl.load(slow + row) != WIDE:
        return
    m = tl.load(top_groups + row * tg_stride)
    lo = tl.load(lo_ptr + row)
    hi = tl.load(hi_ptr + row)
    t = _thresholds(lo, hi, FAN)
    # accumulate element-wise and reduce once at the end: a reduction per sub-tile would
    # cost more than the compares
    acc = tl.zeros((SUB, FAN), tl.float32)
    cnt = tl.zeros((SUB, FAN), tl.int32)
    above = tl.zeros((SUB,), tl.float32)
    base = logits + row * stride
    for start in range(0, BLOCK, SUB):
        offs = tile * BLOCK + start + tl.arange(0, SUB)
        x = load_row(base, offs, V)
        w = exp_at(x, m)
        above += tl.where(x >= hi, w, 0.0)
        hit = (x[:, None] >= t[None, :]) & (x < hi)[:, None]
        acc += tl.where(hit, w[:, None], 0.0)
        cnt += hit.to(tl.int32)
    slot = row * n_tiles + tile
    js = tl.arange(0, FAN)
    tl.store(parts + slot * FAN + js, tl.sum(acc, 0))
    tl.store(part_n + slot * FAN + js, tl.sum(cnt, 0))
    tl.store(part_above + slot, tl.sum(above, 0))


@triton.jit
def wide_narrow_kernel(
    slow, z_ptr, p_ptr, lo_ptr, hi_ptr, above_ptr, n_ptr, parts, part_n, part_above, n_tiles,
    wide_n, HAS_P: tl.constexpr, LAST: tl.constexpr, TILES: tl.constexpr, FAN: tl.constexpr,
    CAP: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    if tl.load(slow + row) != WIDE:
        return
    p = 1.0
    if HAS_P:
        p = tl.load(p_ptr + row).to(tl.float32)
    target = p * tl.load(z_ptr + row)
    lo = tl.load(lo_ptr + row)
    hi = tl.load(hi_ptr + row)
    js = tl.arange(0, FAN)
    tiles = tl.arange(0, TILES)
    slots = (row * n_tiles + tiles)[:, None] * FAN + js[None, :]
    inside = (tiles < n_tiles)[:, None]
    acc = tl.sum(tl.load(parts + slots, mask=inside, other=0.0), 0)
    cnt = tl.sum(tl.load(part_n + slots, mask=inside, other=0), 0)
    above = tl.sum(tl.load(part_above + row * n_tiles + tiles, mask=tiles < n_tiles, other=0.0), 0)
    t = _thresholds(lo, hi, FAN)
    # the highest threshold with mass at or above it still >= p * z: the boundary is past it
    j = tl.max(tl.where(above + acc >= target, js, 0), 0)
    nxt = j + 1 < FAN
    new_lo = tl.sum(tl.where(js == j, t, 0.0), 0)
    new_hi = tl.where(nxt, tl.sum(tl.where(js == j + 1, t, 0.0), 0), hi)
    acc_next = tl.where(nxt, tl.sum(tl.where(js == j + 1, acc, 0.0), 0), 0.0)
    cnt_next = tl.where(nxt, tl.sum(tl.where(js == j + 1, cnt, 0), 0), 0)
    n_in = tl.sum(tl.where(js == j, cnt, 0), 0) - cnt_next
    tl.store(lo_ptr + row, new_lo)
    tl.store(hi_ptr + row, new_hi)
    tl.store(above_ptr + row, above + acc_next)
    tl.store(n_ptr + row, n_in)
    if (n_in > 0) & (n_in <= CAP):
        tl.store(wide_n + row, 0)
        tl.store(slow + row, READY)
    elif LAST:
        tl.store(slow + row, ROW)


@triton.jit
def wide_compact_kernel(
    logits, stride, V, slow, lo_ptr, hi_ptr, buffers, wide_n, BLOCK: tl.constexpr,
    CAP: tl.constexpr,
):  # fmt: skip
    """The logits inside [lo, hi), packed with their ids, at slots from a per-row counter (in
    any order: wide_resolve_kernel sorts them)."""
    row = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1)
    if tl.load(slow + row) != READY:
        return
    lo = tl.load(lo_ptr + row)
    hi = tl.load(hi_ptr + row)
    offs = tile * BLOCK + tl.arange(0, BLOCK)
    x = load_row(logits + row * stride, offs, V)
    take = (x >= lo) & (x < hi) & (offs < V)
    counter = wide_n + row + tl.zeros((BLOCK,), tl.int64)
    pos = tl.atomic_add(counter, 1, mask=take)
    tl.store(buffers + row * CAP + pos, pack(x, offs), mask=take & (pos < CAP))


@triton.jit
def wide_resolve_kernel(
    slow, top_groups, tg_stride, z_ptr, p_ptr, lo_ptr, above_ptr, n_ptr, buffers, thr_ptr,
    ties_ptr, HAS_P: tl.constexpr, CAP: tl.constexpr, LARGE: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    if tl.load(slow + row) != READY:
        return
    m = tl.load(top_groups + row * tg_stride)
    p = 1.0
    if HAS_P:
        p = tl.load(p_ptr + row).to(tl.float32)
    z = tl.load(z_ptr + row)
    lo = tl.load(lo_ptr + row)
    above = tl.load(above_ptr + row)
    n_in = tl.load(n_ptr + row)
    buf = buffers + row * CAP
    if n_in <= LARGE:
        threshold, ties, _ = cut(buf, n_in, lo, above, m, z, p, LARGE)
    else:
        threshold, ties, _ = cut(buf, n_in, lo, above, m, z, p, CAP)
    tl.store(thr_ptr + row, threshold)
    tl.store(ties_ptr + row, ties)


@triton.jit
def wide_mass_kernel(
    logits, stride, V, slow, top_groups, tg_stride, thr_ptr, tile_mass, tile_eq, n_tiles,
    BLOCK: tl.constexpr,
):  # fmt: skip
    """Per tile: the mass of the logits above the threshold and how many equal it."""
    row = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1)
    if tl.load(slow + row) != READY:
        return
    m = tl.load(top_groups + row * tg_stride)
    threshold = tl.load(thr_ptr + row)
    offs = tile * BLOCK + tl.arange(0, BLOCK)
    x = load_row(logits + row * stride, offs, V)
    mass = tl.sum(tl.where(x > threshold, exp_at(x, m), 0.0), 0)
    eq = tl.sum(((x == threshold) & (offs < V)).to(tl.int32), 0)
    tl.store(tile_mass + row * n_tiles + tile, mass)
    tl.store(tile_eq + row * n_tiles + tile, eq)


@triton.jit
def wide_draw_kernel(
    logits, stride, V, slow, top_groups, tg_stride, thr_ptr, ties_ptr, u_ptr, tile_mass,
    tile_eq, n_tiles, out, TILES: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """Inverse CDF in token order: the tile by the tiles' kept masses, then the token in it."""
    row = tl.program_id(0).to(tl.int64)
    if tl.load(slow + row) != READY:
        return
    m = tl.load(top_groups + row * tg_stride)
    threshold = tl.load(thr_ptr + row)
    ties = tl.load(ties_ptr + row)
    tiles = tl.arange(0, TILES)
    valid = tiles < n_tiles
    mass = tl.load(tile_mass + row * n_tiles + tiles, mask=valid, other=0.0)
    eq = tl.load(tile_eq + row * n_tiles + tiles, mask=valid, other=0)
    eq_before = tl.cumsum(eq, 0) - eq
    # the first `ties` logits equal to the threshold (in id order) stay
    kept_eq = tl.minimum(tl.maximum(ties - eq_before, 0), eq)
    w = mass + kept_eq.to(tl.float32) * exp_at(threshold, m)
    goal = tl.load(u_ptr + row) * tl.sum(w, 0)
    cum = tl.cumsum(w, 0)
    tile = tl.min(tl.where(cum > goal, tiles, TILES), 0)
    tile = tl.where(tile < TILES, tile, tl.max(tl.where(w > 0, tiles, 0), 0))
    before = tl.sum(tl.where(tiles == tile, cum - w, 0.0), 0)
    ties_left = tl.sum(tl.where(tiles == tile, ties - eq_before, 0), 0)
    offs = tile * BLOCK + tl.arange(0, BLOCK)
    x = load_row(logits + row * stride, offs, V)
    at = (x == threshold) & (offs < V)
    rank = tl.cumsum(at.to(tl.int32), 0) - 1
    wx = tl.where((x > threshold) | (at & (rank < ties_left)), exp_at(x, m), 0.0)
    run = before + tl.cumsum(wx, 0)
    first = tl.min(tl.where(run > goal, offs, V), 0)
    last = tl.max(tl.where(wx > 0, offs, 0), 0)  # rounding left the goal past the tile
    tl.store(out + row, tl.where(first < V, first, last).to(tl.int64))
    tl.store(slow + row, 0)
