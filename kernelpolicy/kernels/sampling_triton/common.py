"""Pieces shared by the fast path and the per-row kernel: loading, packed sort keys, the
final draw over sorted candidates, and the group pass every call starts with."""

import triton
import triton.language as tl

EMPTY = tl.constexpr(-9223372036854775807)  # a packed key below every real one
# How _bounds_kernel classifies a row.
EMPTY_ROW = tl.constexpr(0)  # nothing finite: token 0
TOP_K_ROW = tl.constexpr(1)  # candidates >= the k-th largest group maximum
TOP_P_ROW = tl.constexpr(2)  # candidates >= a group maximum that bounds the nucleus
INF_ROW = tl.constexpr(3)  # +inf logits share the mass: candidates == +inf
PLAIN_ROW = tl.constexpr(4)  # neither k nor p: a draw from the group masses
WIDE_ROW = tl.constexpr(5)  # top-p whose nucleus no group bound covers: the per-row search


@triton.jit
def load_row(base, offs, V):
    x = tl.load(base + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
    return tl.where(x != x, float("-inf"), x)  # NaN is never drawn


@triton.jit
def row_k_p(k_ptr, p_ptr, row, V, HAS_K: tl.constexpr, HAS_P: tl.constexpr):
    """The row's k (0: no top-k, which any k outside (0, V) means) and p (1.0: no top-p)."""
    k = 0
    if HAS_K:
        k = tl.load(k_ptr + row).to(tl.int64)
        k = tl.where((k > 0) & (k < V), k, 0).to(tl.int32)
    return k, row_p(p_ptr, row, HAS_P)


@triton.jit
def row_p(p_ptr, row, HAS_P: tl.constexpr):
    """The row's p (1.0: no top-p)."""
    p = tl.full((), 1.0, tl.float32)
    if HAS_P:
        p = tl.load(p_ptr + row).to(tl.float32)
    return p


@triton.jit
def exp_at(x, m):
    return tl.exp2((x - m) * 1.4426950408889634)


@triton.jit
def ordered(x):
    """int32 keys in the order of the float32 values x (NaN aside; -0.0 just below +0.0)."""
    bits = x.to(tl.int32, bitcast=True)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


@triton.jit
def from_ordered(key):
    """The float32 whose ordered key is ``key`` (the map is its own inverse)."""
    return (key ^ ((key >> 31) & 0x7FFFFFFF)).to(tl.float32, bitcast=True)


@triton.jit
def pack(x, offs):
    """int64 keys that sort by logit, then by lower token id: (ordered float bits, ~id)."""
    return (ordered(x).to(tl.int64) << 32) | (0x7FFFFFFF - offs).to(tl.int64)


@triton.jit
def unpack(key):
    value = from_ordered((key >> 32).to(tl.int32))
    return value, (0x7FFFFFFF - (key & 0x7FFFFFFF)).to(tl.int32)


@triton.jit
def pick(w, u, N: tl.constexpr):
    """Inverse CDF over w (>= 0, some > 0): the first slot whose running sum passes u * sum."""
    slots = tl.arange(0, N)
    cum = tl.cumsum(w, 0)
    goal = u * tl.sum(w, 0)
    first = tl.min(tl.where(cum > goal, slots, N), 0)
    last = tl.max(tl.where(w > 0, slots, 0), 0)  # rounding left the goal past the end
    return tl.where(first < N, first, last)


@triton.jit
def finish(buf, count, k, p, m, z, u, TOP_K: tl.constexpr, N: tl.constexpr):
    """Sort the candidates; keep the top k (TOP_K) and then the top-p prefix; draw one."""
    slots = tl.arange(0, N)
    keys = tl.load(buf + slots, mask=slots < count, other=EMPTY)
    keys = tl.sort(keys, 0, descending=True)
    v, ids = unpack(keys)
    valid = keys != EMPTY
    if TOP_K:
        valid = valid & (slots < k)
        top = tl.max(tl.where(valid, v, float("-inf")), 0)
        # top-k first: its own softmax; with +inf among them, those share all the mass
        w = tl.where(top == float("inf"), tl.where(v == float("inf"), 1.0, 0.0), exp_at(v, top))
        w = tl.where(valid, w, 0.0)
        z = tl.sum(w, 0)
    else:
        w = tl.where(valid, exp_at(v, m), 0.0)
    before = tl.cumsum(w, 0) - w
    w = tl.where((before < p * z) | (slots == 0), w, 0.0)
    chosen = pick(w, u, N)
    return tl.sum(tl.where(slots == chosen, ids, 0), 0)


@triton.jit
def row_mass(gmax, gsum, G, m, BLOCK: tl.constexpr):
    """The softmax normaliser at the row maximum m, from the group maxima and sums."""
    z = 0.0
    for start in range(0, G, BLOCK):
        slots = start + tl.arange(0, BLOCK)
        top = tl.load(gmax + slots, mask=slots < G, other=float("-inf"))
        s = tl.load(gsum + slots, mask=slots < G, other=0.0)
        z += tl.sum(tl.where(top == float("-inf"), 0.0, s * exp_at(top, m)), 0)
    return z


@triton.jit
def _top_two(a1, a2, af, b1, b2, bf):
    """Combine two (largest, second largest, largest finite) triples: the two largest of a
    multiset (a tied largest is its own second), and the largest finite value."""
    second = tl.maximum(tl.minimum(a1, b1), tl.maximum(a2, b2))
    return tl.maximum(a1, b1), second, tl.maximum(af, bf)


@triton.jit(do_not_specialize=["stride"])
def group_kernel(
    logits, stride, V, gmax, gsum, g_stride, G, counts, n_tiles, BLOCK: tl.constexpr,
    GS: tl.constexpr, ONE_REDUCE: tl.constexpr, STRIDE_UNIT: tl.constexpr = 1,
):  # fmt: skip
    """Per group of GS logits: the maximum (at ``gmax``), the second largest (at ``gmax + G``),
    and sum(exp(x - max)) over the finite logits; and the tile's candidate counter of
    select_kernel set to zero. The second maxima keep the bounds tight when two of a row's
    largest logits share a group.

    ``ONE_REDUCE``: the maximum, the second largest and the largest finite value come from
    one reduction of triples (:func:`_top_two`), where the other form takes four (the
    maximum, the finite maximum, the position of the maximum, then the maximum elsewhere).
    """
    row = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1)
    tl.store(counts + row * n_tiles + tile, 0)
    x = load_row(logits + row * (stride * STRIDE_UNIT), tile * BLOCK + tl.arange(0, BLOCK), V)
    x = tl.reshape(x, (BLOCK // GS, GS))
    finite = tl.where(x == float("inf"), float("-inf"), x)
    if ONE_REDUCE:
        none = tl.full((BLOCK // GS, GS), float("-inf"), tl.float32)
        first, second, top = tl.reduce((x, none, finite), 1, _top_two)
    else:
        top = tl.max(finite, 1)
        at = tl.argmax(x, 1)
        second = tl.max(tl.where(tl.arange(0, GS)[None, :] == at[:, None], float("-inf"), x), 1)
        first = tl.max(x, 1)
    safe = tl.where(top == float("-inf"), 0.0, top)
    slots = row * g_stride + tile * (BLOCK // GS) + tl.arange(0, BLOCK // GS)
    tl.store(gmax + slots, first)
    tl.store(gmax + G + slots, second)
    tl.store(gsum + slots, tl.sum(exp_at(finite, safe[:, None]), 1))
