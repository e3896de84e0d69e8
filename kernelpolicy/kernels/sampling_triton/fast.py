"""The fast path: a 2-D pass that collects the candidates above each row's bound (bounds.py)
tile by tile, and a per-row sort-and-draw over the few collected."""

import triton
import triton.language as tl

from kernelpolicy.kernels.sampling_triton.common import (
    EMPTY,
    INF_ROW,
    PLAIN_ROW,
    TOP_K_ROW,
    TOP_P_ROW,
    WIDE_ROW,
    exp_at,
    finish,
    load_row,
    pack,
    pick,
    row_k_p,
)


@triton.jit(do_not_specialize=["stride"])
def select_kernel(
    logits, stride, V, mode_ptr, bound_ptr, gmax, g_stride, regions, counts, n_tiles,
    BLOCK: tl.constexpr, GS: tl.constexpr, CHUNK: tl.constexpr, R: tl.constexpr,
    STRIDE_UNIT: tl.constexpr = 1,
):  # fmt: skip
    """Per (row, tile): pack the logits >= the row's bound into the tile's region (R slots) and
    count them (the count may exceed R). Slots come from an atomic counter, so their order
    varies; finish_kernel sorts the packed keys, which makes the result independent of it.

    Only the groups whose maximum (group_kernel's) reaches the bound can hold such a logit: a
    top-k bound leaves fewer than k + SLACK of them in a row, a top-p one at most TOP_GROUPS.
    The tile goes by chunks of CHUNK logits, and a chunk without one of those groups is
    skipped whole, neither read nor computed (a masked lane still costs its instructions).
    """
    row = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1)
    NG: tl.constexpr = BLOCK // GS  # groups in the tile
    CG: tl.constexpr = CHUNK // GS  # groups in a chunk
    # the three reads go out together, before the branch
    mode = tl.load(mode_ptr + row)
    bound = tl.load(bound_ptr + row)
    first = tile * NG
    top = tl.load(gmax + row * g_stride + first + tl.arange(0, NG))
    if (mode == TOP_K_ROW) | (mode == TOP_P_ROW) | (mode == INF_ROW):
        # padding groups past the row hold -inf: they reach only a bound of -inf, and the
        # mask below drops their tokens past V
        tl.static_assert(NG // CG <= 63, "at most 63 chunks a tile (one bit each)")
        live = tl.reshape((top >= bound).to(tl.int32), (NG // CG, CG))
        # one bit per chunk holding a live group, in one reduction: the loop then tests a
        # scalar, where a reduction per chunk would cost a barrier each
        bits = tl.sum(tl.max(live, 1).to(tl.int64) << tl.arange(0, NG // CG).to(tl.int64), 0)
        base = logits + row * (stride * STRIDE_UNIT)
        counter = counts + row * n_tiles + tile
        region = regions + (row * n_tiles + tile) * R
        for c in range(0, NG // CG):
            if (bits >> c) & 1:
                groups = first + c * CG + tl.arange(0, CG)
                keep = tl.load(gmax + row * g_stride + groups) >= bound
                offs = groups[:, None] * GS + tl.arange(0, GS)[None, :]
                x = tl.load(base + offs, mask=keep[:, None] & (offs < V),
                            other=float("-inf")).to(tl.float32)  # fmt: skip
                x = tl.where(x != x, float("-inf"), x)  # NaN is never drawn
                take = (x >= bound) & (offs < V) & keep[:, None]
                # relaxed: only the order of the slots is at stake (finish_kernel sorts)
                pos = tl.atomic_add(counter + tl.zeros((CG, GS), tl.int64), 1, mask=take,
                                    sem="relaxed")  # fmt: skip
                tl.store(region + pos, pack(x, offs), mask=take & (pos < R))


@triton.jit
def draw_plain(base, V, gmax, gsum, G, m, z, u, GS: tl.constexpr, BLOCK: tl.constexpr):
    """A draw from the whole softmax, reading one group of logits: the group by the inverse
    CDF of the group masses, then the token inside it with the rest of the uniform."""
    goal = u * z
    run = 0.0
    group = -1
    rest = 0.0
    last = 0
    start = 0
    while (start < G) & (group < 0):
        slots = start + tl.arange(0, BLOCK)
        top = tl.load(gmax + slots, mask=slots < G, other=float("-inf"))
        s = tl.load(gsum + slots, mask=slots < G, other=0.0)
        w = tl.where(top == float("-inf"), 0.0, s * exp_at(top, m))
        last = tl.maximum(last, tl.max(tl.where(w > 0, slots, 0), 0))
        total = tl.sum(w, 0)
        if run + total > goal:
            cum = run + tl.cumsum(w, 0)
            group = tl.min(tl.where(cum > goal, slots, G), 0)
            mass = tl.sum(tl.where(slots == group, w, 0.0), 0)
            rest = (goal - tl.sum(tl.where(slots == group, cum, 0.0), 0) + mass) / mass
        run += total
        start += BLOCK
    group = tl.where(group >= 0, group, last)  # rounding: the last group takes the rest
    rest = tl.minimum(tl.maximum(rest, 0.0), 1.0)
    x = load_row(base, group * GS + tl.arange(0, GS), V)
    return group * GS + pick(exp_at(x, m), rest, GS)


@triton.jit
def _gather(regions, counts, n_tiles, dense, TILES: tl.constexpr, R: tl.constexpr,
            LARGE: tl.constexpr):  # fmt: skip
    """Copy the tiles' candidates into one dense run; the count, or -1 when a tile had more
    than its R slots hold."""
    tiles = tl.arange(0, TILES)
    n = tl.load(counts + tiles, mask=tiles < n_tiles, other=0)
    total = tl.sum(n, 0)
    first = tl.cumsum(n, 0) - n
    slots = tl.arange(0, R)
    take = (slots[None, :] < n[:, None]) & (n[:, None] <= R)
    take = take & (first[:, None] + slots[None, :] < LARGE)
    keys = tl.load(regions + tiles[:, None] * R + slots[None, :], mask=take, other=EMPTY)
    tl.store(dense + first[:, None] + slots[None, :], keys, mask=take)
    return tl.where(tl.max(n, 0) > R, -1, total)


@triton.jit
def _sort_and_draw(buf, total, mode, k, p, m, z, u, N: tl.constexpr):
    if mode == TOP_P_ROW:
        token = finish(buf, total, 0, p, m, z, u, False, N)
    else:  # top-k; a row of +inf logits keeps them all
        token = finish(buf, total, tl.where(mode == TOP_K_ROW, k, total), p, m, 1.0, u, True, N)
    return token


@triton.jit(do_not_specialize=["stride"])
def finish_kernel(
    logits, stride, V, mode_ptr, z_ptr, m_ptr, gmax, gsum, g_stride, G,
    regions, counts, n_tiles, dense, k_ptr, p_ptr, u_ptr, out, slow, bound_ptr, states,
    HAS_K: tl.constexpr, HAS_P: tl.constexpr, GS: tl.constexpr, TILES: tl.constexpr,
    R: tl.constexpr, SMALL: tl.constexpr, LARGE: tl.constexpr, BLOCK: tl.constexpr,
    WR: tl.constexpr, NR: tl.constexpr, WIDE: tl.constexpr, STRIDE_UNIT: tl.constexpr = 1,
):  # fmt: skip
    """Per row: gather the tiles' candidates, sort them and draw; or draw a plain row from the
    group masses; or flag the row for row_kernel."""
    row = tl.program_id(0).to(tl.int64)
    mode = tl.load(mode_ptr + row)
    m = tl.load(m_ptr + row)
    z = tl.load(z_ptr + row)
    u = tl.load(u_ptr + row)
    k, p = row_k_p(k_ptr, p_ptr, row, V, HAS_K, HAS_P)
    token = 0
    needs_row = mode == WIDE_ROW
    if (mode == TOP_K_ROW) | (mode == TOP_P_ROW) | (mode == INF_ROW):
        buf = dense + row * LARGE
        total = _gather(
            regions + row * n_tiles * R, counts + row * n_tiles, n_tiles, buf, TILES, R, LARGE
        )  # fmt: skip
        if (total < 0) | (total > LARGE):
            needs_row = True
        else:
            tl.debug_barrier()  # dense was written by the other threads of this program
            if total <= SMALL:
                token = _sort_and_draw(buf, total, mode, k, p, m, z, u, SMALL)
            else:
                token = _sort_and_draw(buf, total, mode, k, p, m, z, u, LARGE)
    elif mode == PLAIN_ROW:
        base = logits + row * (stride * STRIDE_UNIT)
        token = draw_plain(
            base, V, gmax + row * g_stride, gsum + row * g_stride, G, m, z, u, GS, BLOCK
        )  # fmt: skip
    top_p = (mode == TOP_P_ROW) | (mode == WIDE_ROW)
    if needs_row & top_p:
        # the wide kernels' first interval: below m - ln(V / (1 - p)) lies less than (1 - p)
        # of the mass (z >= 1), and a top-p row's group bound is a logit of its nucleus
        lo = m - (tl.log(V.to(tl.float32)) - tl.log(1.0 - p))
        lo = tl.where(mode == TOP_P_ROW, tl.maximum(lo, tl.load(bound_ptr + row)), lo)
        hi = (m + 0.0).to(tl.int32, bitcast=True)
        hi = tl.where(m >= 0, hi + 1, hi - 1).to(tl.float32, bitcast=True)  # just above m
        state = states + row * 4 * WR  # the first round's interval: lo, and NR bins / width
        tl.store(state, lo)
        tl.store(state + WR, NR / (hi - lo))
    # 1: row_kernel takes the row; 2: the wide kernels do (see wide.py), when launched
    to_wide = top_p & HAS_P & WIDE
    tl.store(slow + row, tl.where(needs_row, tl.where(to_wide, 2, 1), 0).to(tl.int32))
    tl.store(out + row, token.to(tl.int64), mask=needs_row == 0)
