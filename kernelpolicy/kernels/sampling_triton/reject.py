"""The wide nucleus by rejection: a top-p row whose nucleus is too wide for the fast path's
candidates (finish_kernel marks it ``slow == WIDE``) is first sampled by proposing tokens from
its whole softmax and keeping the first proposal that lies in the nucleus.

A token lies in the nucleus when the mass of the tokens before it (larger logits, and equal
logits of lower ids) is below ``p * z``. Proposals drawn from the whole softmax and kept only
inside the nucleus are distributed exactly as the nucleus renormalised (rejection sampling);
the first kept of ``P`` independent proposals is too. A nucleus of mass ``p`` keeps each
proposal with probability ``p``, so a row keeps none with probability ``(1 - p)^P`` (1e-8 for
p = 0.9 and P = 8); such a row stays ``WIDE`` and the exact wide kernels (``wide.py``) draw it.

The launches, one read of the row per step:

1. ``propose_kernel`` (per row): ``P`` tokens from the group masses, each by its own uniform,
   all in one pass over them.
2. ``reject_tile_kernel`` ((row, tile) grid): per tile, the mass before each of ``STEP``
   proposals (checking a logit against a proposal is most of the work, so a step checks a few).
3. ``reject_pick_kernel`` (per row): sums the tiles in tile order and keeps the first proposal
   of the step inside the nucleus. The first step checks ``FIRST`` proposals (most rows keep
   one of them), the next steps ``STEP`` each; a row kept already returns at once (with
   p = 0.9 and 2 proposals first, 1 row in 100 needs the second step).
"""

import triton
import triton.language as tl

from kernelpolicy.kernels.sampling_triton.common import exp_at, load_row, pack, row_p
from kernelpolicy.kernels.sampling_triton.wide import WIDE  # finish_kernel's flag for them


@triton.jit(do_not_specialize=["stride"])
def propose_kernel(
    logits, stride, V, slow, m_ptr, z_ptr, gmax, gsum, g_stride, G, q_ptr, proposals,
    GS: tl.constexpr, P: tl.constexpr, PP: tl.constexpr, BLOCK: tl.constexpr,
    STRIDE_UNIT: tl.constexpr = 1,
):  # fmt: skip
    """P tokens from the row's whole softmax, each by its own uniform (q_ptr: [rows, P]): one
    pass over the group masses finds every proposal's group by the inverse CDF, then one read
    of those P groups picks each token inside its group with the rest of its uniform. PP: P
    rounded up to a power of two."""
    row = tl.program_id(0).to(tl.int64)
    if tl.load(slow + row) != WIDE:
        return
    m = tl.load(m_ptr + row)
    z = tl.load(z_ptr + row)
    r = tl.arange(0, PP)
    goal = tl.load(q_ptr + row * P + r, mask=r < P, other=0.0) * z
    gmax_row = gmax + row * g_stride
    gsum_row = gsum + row * g_stride
    run = 0.0
    last = 0
    group = tl.full((PP,), -1, tl.int32)
    rest = tl.zeros((PP,), tl.float32)
    for start in range(0, G, BLOCK):
        slots = start + tl.arange(0, BLOCK)
        top = tl.load(gmax_row + slots, mask=slots < G, other=float("-inf"))
        s = tl.load(gsum_row + slots, mask=slots < G, other=0.0)
        w = tl.where(top == float("-inf"), 0.0, s * exp_at(top, m))
        last = tl.maximum(last, tl.max(tl.where(w > 0, slots, 0), 0))
        cum = run + tl.cumsum(w, 0)
        hit = (cum[None, :] > goal[:, None]) & (group[:, None] < 0)
        first = tl.min(tl.where(hit, slots[None, :], G), 1)  # per proposal, G: not here
        found = first < G
        at = slots[None, :] == first[:, None]
        mass = tl.where(found, tl.sum(tl.where(at, w[None, :], 0.0), 1), 1.0)
        cum_at = tl.sum(tl.where(at, cum[None, :], 0.0), 1)
        rest = tl.where(found, (goal - cum_at + mass) / mass, rest)
        group = tl.where(found, first, group)
        run += tl.sum(w, 0)
    group = tl.where(group >= 0, group, last)  # rounding: the last group takes the rest
    rest = tl.minimum(tl.maximum(rest, 0.0), 1.0)
    inside = tl.arange(0, GS)
    x = load_row(logits + row * (stride * STRIDE_UNIT), group[:, None] * GS + inside[None, :], V)
    w = exp_at(x, m)  # [P, GS]: each proposal's group
    cum = tl.cumsum(w, 1)
    pos = tl.min(tl.where(cum > (rest * tl.sum(w, 1))[:, None], inside[None, :], GS), 1)
    end = tl.max(tl.where(w > 0, inside[None, :], 0), 1)  # rounding, as in pick
    token = group * GS + tl.where(pos < GS, pos, end)
    tl.store(proposals + row * P + r, token.to(tl.int32), mask=r < P)


@triton.jit(do_not_specialize=["stride"])
def reject_tile_kernel(
    logits, stride, V, slow, m_ptr, proposals, before, n_tiles, first, P: tl.constexpr,
    STEP: tl.constexpr, BLOCK: tl.constexpr, STRIDE_UNIT: tl.constexpr = 1,
):  # fmt: skip
    """Per tile: the mass of its tokens that come before proposals first .. first + STEP - 1
    in the descending order (ties by lower id first), at before[row, tile, r]."""
    row = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1)
    if tl.load(slow + row) != WIDE:
        return
    m = tl.load(m_ptr + row)
    base = logits + row * (stride * STRIDE_UNIT)
    offs = tile * BLOCK + tl.arange(0, BLOCK)
    x = load_row(base, offs, V)
    keys = pack(x, offs)
    w = exp_at(x, m)  # 0 for -inf (and the padding)
    out = before + (row * n_tiles + tile) * P
    for i in tl.static_range(STEP):
        r = first + i
        if r < P:
            token = tl.load(proposals + row * P + r)
            key = pack(load_row(base, token, V), token)
            tl.store(out + r, tl.sum(tl.where(keys > key, w, 0.0), 0))


@triton.jit
def reject_pick_kernel(
    slow, z_ptr, p_ptr, proposals, before, n_tiles, out, first, HAS_P: tl.constexpr,
    P: tl.constexpr, STEP: tl.constexpr,
):  # fmt: skip
    """Keep the first of proposals first .. first + STEP - 1 inside the nucleus; a row with
    none stays WIDE (for the next step, or the exact wide kernels)."""
    row = tl.program_id(0).to(tl.int64)
    if tl.load(slow + row) != WIDE:
        return
    target = row_p(p_ptr, row, HAS_P) * tl.load(z_ptr + row)
    r = first + tl.arange(0, STEP)
    valid = r < P
    mass = tl.zeros((STEP,), tl.float32)
    for t in range(0, n_tiles):  # in tile order: the same sums every time
        mass += tl.load(before + (row * n_tiles + t) * P + r, mask=valid, other=0.0)
    kept = tl.min(tl.where(valid & (mass < target), r, P), 0)
    if kept < P:
        token = tl.sum(tl.where(r == kept, tl.load(proposals + row * P + r, mask=valid), 0), 0)
        tl.store(out + row, token.to(tl.int64))
        tl.store(slow + row, 0)
