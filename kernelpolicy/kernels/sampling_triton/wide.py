"""The wide nucleus across the whole GPU: top-p rows whose nucleus is too wide for the fast
path's candidate buffer (finish_kernel marks them ``slow == WIDE``).

Instead of one program reading its row several times (row_kernel), every pass over the logits
is a 2-D grid of (row, tile) programs, and each pass costs little more than the read:

1. ``wide_tile_kernel``: per tile, a histogram of the logits over ``NR`` equal bins of the row's
   current interval (Triton's integer histogram: cheap, where a per-threshold mass is not), and
   the exact softmax mass of the logits above the interval.
2. ``wide_narrow_kernel`` (per row): the tiles' histograms, summed in tile order, bound the mass
   at or above every bin edge from below and from above (each logit of a bin weighs between
   its edges' weights). The new interval runs from the highest edge whose mass surely reaches
   ``p * z`` to the lowest edge whose mass surely does not: the nucleus boundary lies between.
   ``ROUNDS`` rounds, a fixed launch sequence (a CUDA graph holds it).
3. ``wide_compact_kernel``: the logits inside the final interval, packed with their ids, and per
   tile the exact mass above it.
4. ``wide_resolve_kernel`` (per row): sorts the interval's logits and finds the exact boundary
   (the smallest prefix of the descending order whose mass reaches ``p * z``; ties at the
   boundary keep the lowest ids), and every tile's kept mass.
5. ``wide_draw_kernel`` (per row): the tile by inverse CDF over the kept masses, then the token
   inside it, in token order.

Which logits are inside, above or below an interval is decided by the same chain of bin
indices in every kernel (never by comparing with rounded edges), so the counts, the masses and
the collected logits always agree. A row whose interval still holds more than ``CAP`` logits
after the rounds (a tied group wider than the buffer) goes back to row_kernel (``slow == ROW``),
which is exact for any row.
"""

import triton
import triton.language as tl

from kernelpolicy.kernels.sampling_triton.common import (
    EMPTY,
    exp_at,
    load_row,
    pack,
    row_p,
    unpack,
)

ROW = tl.constexpr(1)  # row_kernel takes the row
WIDE = tl.constexpr(2)  # the interval is being narrowed
READY = tl.constexpr(3)  # the interval fits CAP: compact, resolve, draw
NR = tl.constexpr(254)  # real bins; histogram index 0 is "below", 255 "above"
SLACK = tl.constexpr(1e-4)  # relative slack on the mass bounds (rounding of edges and sums)


@triton.jit
def _bin(x, lo, scale):
    """The bin of x in an interval (lo, NR / width); any float, -inf included."""
    f = tl.minimum(tl.maximum((x - lo) * scale, -1.0), NR + 0.0)
    return tl.floor(f).to(tl.int32)


@triton.jit
def classify(x, state, DEPTH: tl.constexpr, R: tl.constexpr):
    """(inside, above) for x after DEPTH narrowings. ``state`` points at the row's
    [lo, scale, k1, k2] per round (R rounds, as float32)."""
    c = _bin(x, tl.load(state), tl.load(state + R))
    inside = (c >= 0) & (c < NR)
    above = c >= NR
    for d in tl.static_range(DEPTH):
        c = tl.minimum(tl.maximum(_bin(x, tl.load(state + d), tl.load(state + R + d)), 0), NR - 1)
        k1 = tl.load(state + 2 * R + d).to(tl.int32)
        k2 = tl.load(state + 3 * R + d).to(tl.int32)
        above = above | (inside & (c >= k2))
        inside = inside & (c >= k1) & (c < k2)
    return inside, above


@triton.jit(do_not_specialize=["stride"])
def wide_tile_kernel(
    logits, stride, V, slow, m_ptr, states, hists, part_above, n_tiles,
    DEPTH: tl.constexpr, R: tl.constexpr, BLOCK: tl.constexpr, SUB: tl.constexpr,
    STRIDE_UNIT: tl.constexpr = 1,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1)
    if tl.load(slow + row) != WIDE:
        return
    state = states + row * 4 * R
    m = tl.load(m_ptr + row)
    lo = tl.load(state + DEPTH)
    scale = tl.load(state + R + DEPTH)
    hist = tl.zeros((256,), tl.int32)
    mass = tl.zeros((SUB,), tl.float32)
    for start in range(0, BLOCK, SUB):
        offs = tile * BLOCK + start + tl.arange(0, SUB)
        x = load_row(logits + row * (stride * STRIDE_UNIT), offs, V)
        inside, above = classify(x, state, DEPTH, R)
        c = tl.minimum(tl.maximum(_bin(x, lo, scale), 0), NR - 1)
        hist += tl.histogram(tl.where(inside, 1 + c, tl.where(above, NR + 1, 0)), 256)
        mass += tl.where(above, exp_at(x, m), 0.0)
    slot = row * n_tiles + tile
    tl.store(hists + slot * 256 + tl.arange(0, 256), hist)
    tl.store(part_above + slot, tl.sum(mass, 0))


@triton.jit
def wide_narrow_kernel(
    slow, m_ptr, z_ptr, p_ptr, states, hists, part_above, n_tiles, n_ptr,
    wide_n, HAS_P: tl.constexpr, DEPTH: tl.constexpr, R: tl.constexpr, TILES: tl.constexpr,
    CAP: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    if tl.load(slow + row) != WIDE:
        return
    target = row_p(p_ptr, row, HAS_P) * tl.load(z_ptr + row)
    m = tl.load(m_ptr + row)
    state = states + row * 4 * R
    lo = tl.load(state + DEPTH)
    scale = tl.load(state + R + DEPTH)
    bins = tl.arange(0, 256)
    counts = tl.zeros((256,), tl.int32)
    above = 0.0
    for t in range(0, n_tiles):  # in tile order: the same sums every time
        counts += tl.load(hists + (row * n_tiles + t) * 256 + bins)
        above += tl.load(part_above + row * n_tiles + t)
    real = (bins >= 1) & (bins <= NR)
    i = (bins - 1).to(tl.float32)  # the real bin's number
    n = tl.where(real, counts, 0).to(tl.float32)
    low = n * exp_at(lo + i / scale, m) * (1.0 - SLACK)
    high = n * tl.minimum(exp_at(lo + (i + 1.0) / scale, m), 1.0) * (1.0 + SLACK)
    # mass at or above each bin's lower edge: above + the bins from it up
    at_least = above + tl.sum(low, 0) - tl.cumsum(low, 0) + low
    at_most = above * (1.0 + SLACK) + tl.sum(high, 0) - tl.cumsum(high, 0) + high
    k1 = tl.max(tl.where(real & (at_least >= target), bins - 1, 0), 0)
    k2 = tl.min(tl.where(real & (at_most < target) & (bins - 1 > k1), bins - 1, NR), 0)
    n_in = tl.sum(tl.where(real & (bins - 1 >= k1) & (bins - 1 < k2), counts, 0), 0)
    tl.store(state + 2 * R + DEPTH, k1.to(tl.float32))
    tl.store(state + 3 * R + DEPTH, k2.to(tl.float32))
    if DEPTH + 1 < R:  # the next round bins the new interval
        tl.store(state + DEPTH + 1, lo + k1.to(tl.float32) / scale)
        tl.store(state + R + DEPTH + 1, scale * NR / (k2 - k1).to(tl.float32))
    else:
        tl.store(n_ptr + row, n_in)
        tl.store(wide_n + row, 0)
        tl.store(slow + row, tl.where((n_in > 0) & (n_in <= CAP), READY, ROW))


@triton.jit(do_not_specialize=["stride"])
def wide_compact_kernel(
    logits, stride, V, slow, m_ptr, states, buffers, wide_n, part_above,
    n_tiles, R: tl.constexpr, BLOCK: tl.constexpr, SUB: tl.constexpr, CAP: tl.constexpr,
    STRIDE_UNIT: tl.constexpr = 1,
):  # fmt: skip
    """The logits inside the final interval, packed with their ids, and the tile's mass above
    it. Each sub-tile reserves its run of slots with one atomic on a per-row counter (runs land
    in any order: wide_resolve_kernel sorts them); a prefix sum places the logits in the run."""
    row = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1)
    if tl.load(slow + row) != READY:
        return
    m = tl.load(m_ptr + row)
    mass = tl.zeros((SUB,), tl.float32)
    for start in range(0, BLOCK, SUB):
        offs = tile * BLOCK + start + tl.arange(0, SUB)
        x = load_row(logits + row * (stride * STRIDE_UNIT), offs, V)
        inside, above = classify(x, states + row * 4 * R, R, R)
        take = (inside & (offs < V)).to(tl.int32)
        n = tl.sum(take, 0)
        if n > 0:
            first = tl.atomic_add(wide_n + row, n, sem="relaxed")
            pos = first + tl.cumsum(take, 0) - 1
            tl.store(buffers + row * CAP + pos, pack(x, offs), mask=(take > 0) & (pos < CAP))
        mass += tl.where(above, exp_at(x, m), 0.0)
    tl.store(part_above + row * n_tiles + tile, tl.sum(mass, 0))


@triton.jit
def wide_resolve_kernel(
    slow, m_ptr, z_ptr, p_ptr, n_ptr, buffers, part_above, n_tiles, tile_mass,
    tile_eq, thr_ptr, ties_ptr, HAS_P: tl.constexpr, BLOCK: tl.constexpr, N: tl.constexpr,
    SMALLER: tl.constexpr, CAP: tl.constexpr,
):  # fmt: skip
    """Sort the interval's logits; the boundary, the kept ties (lowest ids: the sort keeps ties
    in id order), every tile's kept mass and its logits equal to the boundary. Each launch
    sorts N slots and takes the rows with more than SMALLER logits, at most N."""
    row = tl.program_id(0).to(tl.int64)
    if tl.load(slow + row) != READY:
        return
    n_in = tl.load(n_ptr + row)
    if (n_in > N) | (n_in <= SMALLER):
        return  # the other launch takes it
    target = row_p(p_ptr, row, HAS_P) * tl.load(z_ptr + row)
    m = tl.load(m_ptr + row)
    above = 0.0
    for t in range(0, n_tiles):
        above += tl.load(part_above + row * n_tiles + t)
    slots = tl.arange(0, N)
    keys = tl.load(buffers + row * CAP + slots, mask=slots < n_in, other=EMPTY)
    keys = tl.sort(keys, 0, descending=True)
    v, ids = unpack(keys)
    w = tl.where(keys != EMPTY, exp_at(v, m), 0.0)
    cum = above + tl.cumsum(w, 0)
    first = tl.min(tl.where((cum >= target) & (slots < n_in), slots, N), 0)
    first = tl.where(first == N, n_in - 1, first)  # rounding left it short: keep all
    threshold = tl.sum(tl.where(slots == first, v, 0.0), 0)
    kept = slots <= first
    tl.store(thr_ptr + row, threshold)
    tl.store(ties_ptr + row, tl.sum((kept & (v == threshold)).to(tl.int32), 0))
    tile_of = ids // BLOCK
    tied = (keys != EMPTY) & (v == threshold)
    for t in range(0, n_tiles):
        mine = tl.sum(tl.where(kept & (tile_of == t), w, 0.0), 0)
        tl.store(tile_mass + row * n_tiles + t, tl.load(part_above + row * n_tiles + t) + mine)
        tl.store(tile_eq + row * n_tiles + t, tl.sum((tied & (tile_of == t)).to(tl.int32), 0))


@triton.jit(do_not_specialize=["stride"])
def wide_draw_kernel(
    logits, stride, V, slow, m_ptr, thr_ptr, ties_ptr, u_ptr, tile_mass,
    tile_eq, n_tiles, out, TILES: tl.constexpr, BLOCK: tl.constexpr, SUB: tl.constexpr,
    STRIDE_UNIT: tl.constexpr = 1,
):  # fmt: skip
    """Inverse CDF in token order: the tile by the tiles' kept masses, then the token in it."""
    row = tl.program_id(0).to(tl.int64)
    if tl.load(slow + row) != READY:
        return
    m = tl.load(m_ptr + row)
    threshold = tl.load(thr_ptr + row)
    tiles = tl.arange(0, TILES)
    valid = tiles < n_tiles
    w = tl.load(tile_mass + row * n_tiles + tiles, mask=valid, other=0.0)
    eq = tl.load(tile_eq + row * n_tiles + tiles, mask=valid, other=0)
    goal = tl.load(u_ptr + row) * tl.sum(w, 0)
    cum = tl.cumsum(w, 0)
    tile = tl.min(tl.where(cum > goal, tiles, TILES), 0)
    tile = tl.where(tile < TILES, tile, tl.max(tl.where(w > 0, tiles, 0), 0))
    before = tl.sum(tl.where(tiles == tile, cum - w, 0.0), 0)
    # the logits equal to the boundary in earlier tiles use up the kept ties first
    ties_left = tl.load(ties_ptr + row) - tl.sum(tl.where(tiles < tile, eq, 0), 0)
    answer = -1
    last = 0
    start = tile * BLOCK
    while (start < tile * BLOCK + BLOCK) & (answer < 0):
        offs = start + tl.arange(0, SUB)
        x = load_row(logits + row * (stride * STRIDE_UNIT), offs, V)
        at = (x == threshold) & (offs < V)
        rank = tl.cumsum(at.to(tl.int32), 0) - 1
        wx = tl.where((x > threshold) | (at & (rank < ties_left)), exp_at(x, m), 0.0)
        ties_left -= tl.sum(at.to(tl.int32), 0)
        run = before + tl.cumsum(wx, 0)
        answer = tl.min(tl.where(run > goal, offs, V), 0)
        answer = tl.where(answer < V, answer, -1)
        last = tl.maximum(last, tl.max(tl.where(wx > 0, offs, 0), 0))
        before += tl.sum(wx, 0)
        start += SUB
    # rounding left the goal past the tile: its last kept token
    tl.store(out + row, tl.where(answer >= 0, answer, last).to(tl.int64))
    tl.store(slow + row, 0)
