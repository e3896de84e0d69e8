"""Step 2, per row: how the row is sampled, the lower bound of its candidates, its maximum and
its softmax normaliser, from the group maxima and second maxima of step 1.

The bound is found by a search over the group values themselves, in one program per row, with
no sort: over the 32-bit keys that order float32 values, ``FAN`` thresholds per pass split the
interval ``[lo, hi)`` that holds the answer, each pass reading the row's group values once (they
were just written, so from L2). A pass keeps the highest threshold whose values still weigh
enough. It stops once at most ``SLACK`` group values lie between ``lo`` and ``hi`` (the bound is
then at most ``SLACK`` values below the exact one: a few more candidates, never a wrong draw) or
when the interval is one key wide (the exact value); 32 / log2(FAN) passes reach that for
any float32 input (16 of 4 thresholds), and typical rows stop after a few.

* Top-k: the weight is the count. ``lo`` ends at or below the k-th largest group value, which is
  at or below the k-th largest logit (group values are distinct tokens' logits), and fewer than
  ``k + SLACK`` group values lie above it, so fewer than ``(k - 1 + SLACK) * GS`` logits do:
  the host's choice of the group size keeps that within the per-row kernel's buffer.
* Top-p: the weight is the softmax mass. ``lo`` ends at or below the smallest group value of
  the first ones whose own mass reaches ``p``: the nucleus lies above it. When all group values
  together do not reach ``p``, or more than ``TG`` lie above ``lo``, the nucleus is wide.
"""

import triton
import triton.language as tl

from kernelpolicy.kernels.sampling_triton.common import (
    EMPTY_ROW,
    INF_ROW,
    PLAIN_ROW,
    TOP_K_ROW,
    TOP_P_ROW,
    WIDE_ROW,
    exp_at,
    from_ordered,
    ordered,
    row_k_p,
    row_mass,
)


@triton.jit
def _scan(vals, n, CH: tl.constexpr):
    """Over n group values: the maximum, the largest and smallest finite values, and the counts
    of +inf and of finite values."""
    top = tl.full((CH,), float("-inf"), tl.float32)
    high = tl.full((CH,), float("-inf"), tl.float32)
    low = tl.full((CH,), float("inf"), tl.float32)
    n_inf = tl.zeros((CH,), tl.int32)
    n_fin = tl.zeros((CH,), tl.int32)
    for start in range(0, n, CH):
        offs = start + tl.arange(0, CH)
        g = tl.load(vals + offs, mask=offs < n, other=float("-inf"))
        finite = (g > float("-inf")) & (g < float("inf"))
        top = tl.maximum(top, g)
        high = tl.maximum(high, tl.where(finite, g, float("-inf")))
        low = tl.minimum(low, tl.where(finite, g, float("inf")))
        n_inf += (g == float("inf")).to(tl.int32)
        n_fin += finite.to(tl.int32)
    return tl.max(top, 0), tl.max(high, 0), tl.min(low, 0), tl.sum(n_inf, 0), tl.sum(n_fin, 0)


@triton.jit
def _weigh(vals, n, m, t, by_mass, FAN: tl.constexpr, CH: tl.constexpr):
    """The count and the mass (at the maximum m; only when by_mass) of the values whose keys are
    at or above each of the FAN threshold keys t."""
    count = tl.zeros((CH, FAN), tl.int32)
    mass = tl.zeros((CH, FAN), tl.float32)
    for start in range(0, n, CH):
        offs = start + tl.arange(0, CH)
        g = tl.load(vals + offs, mask=offs < n, other=float("-inf"))
        above = ordered(g)[:, None] >= t[None, :]
        count += above.to(tl.int32)
        if by_mass:
            mass += tl.where(above, exp_at(g, m)[:, None], 0.0)
    return tl.sum(count, 0), tl.sum(mass, 0)


@triton.jit
def _narrow(vals, n, m, lo, hi, c_hi, target, by_mass, FAN: tl.constexpr, CH: tl.constexpr):
    """One pass: FAN thresholds over [lo, hi); the highest whose weight reaches target becomes
    lo, the next one hi. Returns (lo, hi, count at lo, count at hi, weight at the old lo)."""
    i = tl.arange(0, FAN)
    width = hi.to(tl.int64) - lo.to(tl.int64)  # up to 2^32: int32 would overflow
    t = (lo.to(tl.int64) + (width * i) // FAN).to(tl.int32)
    count, mass = _weigh(vals, n, m, t, by_mass, FAN, CH)
    weight = tl.where(by_mass, mass, count.to(tl.float32))
    j = tl.max(tl.where(weight >= target, i, 0), 0)
    last = j + 1 >= FAN
    new_hi = tl.where(last, hi, tl.sum(tl.where(i == j + 1, t, 0), 0))
    c_hi = tl.where(last, c_hi, tl.sum(tl.where(i == j + 1, count, 0), 0))
    c_lo = tl.sum(tl.where(i == j, count, 0), 0)
    at_lo = tl.sum(tl.where(i == 0, weight, 0.0), 0)
    return tl.sum(tl.where(i == j, t, 0), 0), new_hi, c_lo, c_hi, at_lo


@triton.jit
def search(vals, n, m, low, high, c_low, c_high, target, by_mass, FAN: tl.constexpr,
           CH: tl.constexpr, PASSES: tl.constexpr, SLACK: tl.constexpr):  # fmt: skip
    """The lower bound of the module doc: the largest key ``lo`` whose group values weigh at
    least ``target`` (as far as the passes get), searched between the values ``low`` (count
    ``c_low``) and ``high`` (exclusive; count at or above it ``c_high``).

    Returns:
        (found: whether the values at or above ``low`` reach ``target`` at all, the bound as a
        float32, the count of group values at or above it).
    """
    lo = ordered(low)
    hi = ordered(high) + 1
    lo, hi, c_lo, c_hi, at_low = _narrow(vals, n, m, lo, hi, c_high, target, by_mass, FAN, CH)
    found = at_low >= target
    for _ in range(PASSES - 1):
        if found & (hi.to(tl.int64) - lo.to(tl.int64) > 1) & (c_lo - c_hi > SLACK):
            lo, hi, c_lo, c_hi, at_low = _narrow(
                vals, n, m, lo, hi, c_hi, target, by_mass, FAN, CH
            )  # fmt: skip
    return found, from_ordered(lo), tl.where(found, c_lo, c_low)


@triton.jit
def bounds_kernel(
    gmax, gsum, g_stride, G, V, k_ptr, p_ptr, mode_ptr, bound_ptr, z_ptr, m_ptr,
    HAS_K: tl.constexpr, HAS_P: tl.constexpr, TG: tl.constexpr, BLOCK: tl.constexpr,
    FAN: tl.constexpr, CH: tl.constexpr, PASSES: tl.constexpr, SLACK: tl.constexpr,
):  # fmt: skip
    """Per row: the mode, the candidate bound, the maximum and the softmax normaliser."""
    row = tl.program_id(0).to(tl.int64)
    vals = gmax + row * g_stride  # G maxima, then G second maxima
    m, high, low, n_inf, n_fin = _scan(vals, 2 * G, CH)
    k, p = row_k_p(k_ptr, p_ptr, row, V, HAS_K, HAS_P)
    mode = EMPTY_ROW
    bound = m
    z = 1.0
    if m == float("-inf"):
        mode = EMPTY_ROW
    elif k > 0:
        mode = TOP_K_ROW
        if n_inf >= k:  # +inf logits fill the top k
            bound = float("inf")
        elif n_fin + n_inf < k:  # fewer group values than k: every logit is a candidate
            bound = float("-inf")
        else:
            found, bound, count = search(
                vals, 2 * G, m, low, high, n_fin + n_inf, n_inf, k.to(tl.float32), False, FAN,
                CH, PASSES, SLACK,
            )  # fmt: skip
    elif m == float("inf"):
        mode = INF_ROW
    else:
        z = row_mass(gmax + row * g_stride, gsum + row * g_stride, G, m, BLOCK)
        if p < 1.0:
            found, bound, count = search(
                vals, 2 * G, m, low, high, n_fin, 0, p * z, True, FAN, CH, PASSES, SLACK
            )  # fmt: skip
            mode = tl.where(found & (count <= TG), TOP_P_ROW, WIDE_ROW)
        else:
            mode = PLAIN_ROW
    tl.store(mode_ptr + row, mode)
    tl.store(bound_ptr + row, bound)
    tl.store(z_ptr + row, z)
    tl.store(m_ptr + row, m)
