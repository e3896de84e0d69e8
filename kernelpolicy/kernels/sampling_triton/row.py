"""The per-row kernel: one program takes a whole row, for the rows the fast path flags (a
nucleus wider than its candidate buffer, many tied logits, candidates crowded into one tile).
Exact whatever the row holds, but it reads the row several times on one SM."""

import triton
import triton.language as tl

from kernelpolicy.kernels.sampling_triton.common import (
    EMPTY,
    INF_ROW,
    TOP_K_ROW,
    TOP_P_ROW,
    exp_at,
    finish,
    load_row,
    pack,
    row_k_p,
    unpack,
)


@triton.jit
def compact(base, V, buf, bound, tie_limit, LIMIT_TIES: tl.constexpr, BLOCK: tl.constexpr,
             CAP: tl.constexpr):  # fmt: skip
    """Pack the logits > bound, and those == bound (the first tie_limit of them when
    LIMIT_TIES), into buf in token order; returns how many were selected (may exceed CAP)."""
    offs0 = tl.arange(0, BLOCK)
    n = 0
    n_eq = 0
    for start in range(0, V, BLOCK):
        offs = start + offs0
        x = load_row(base, offs, V)
        if tl.max(x, 0) >= bound:
            eq = (x == bound) & (offs < V)
            take = (x > bound) | eq
            if LIMIT_TIES:
                rank = n_eq + tl.cumsum(eq.to(tl.int32), 0) - 1
                take = (x > bound) | (eq & (rank < tie_limit))
                n_eq += tl.sum(eq.to(tl.int32), 0)
            pos = n + tl.cumsum(take.to(tl.int32), 0) - 1
            tl.store(buf + pos, pack(x, offs), mask=take & (pos < CAP))
            n += tl.sum(take.to(tl.int32), 0)
    return n


@triton.jit
def search(base, V, buf, m, z, p, log_v, BLOCK: tl.constexpr, CAP: tl.constexpr,
            FAN: tl.constexpr, ROUNDS: tl.constexpr):  # fmt: skip
    """The exact nucleus threshold without a candidate bound: narrow [lo, hi) with FAN
    thresholds per pass until the logits inside fit buf, then sort those. Returns the
    threshold, how many of the logits equal to it stay (the lowest ids), and the nucleus
    mass."""
    target = p * z
    # below m - ln(V / (1 - p)) lies less than (1 - p) of the mass (z >= 1): start there
    lo = m - (log_v - tl.log(1.0 - p))
    hi = (m + 0.0).to(tl.int32, bitcast=True)
    hi = tl.where(m >= 0, hi + 1, hi - 1).to(tl.float32, bitcast=True)  # just above m
    offs0 = tl.arange(0, BLOCK)
    js = tl.arange(0, FAN)
    above = 0.0
    n_in = CAP + 1
    rounds = 0
    moving = True
    while (n_in > CAP) & (rounds < ROUNDS) & moving:
        t = lo + (hi - lo) * js.to(tl.float32) / FAN
        acc = tl.zeros((FAN,), tl.float32)
        above = 0.0
        n_in = 0
        for start in range(0, V, BLOCK):
            offs = start + offs0
            x = load_row(base, offs, V)
            w = exp_at(x, m)
            above += tl.sum(tl.where(x >= hi, w, 0.0), 0)
            inside = (x >= lo) & (x < hi)
            if tl.max(inside.to(tl.int32), 0) > 0:
                # read again inside the branch: with x from outside, Triton 3.6's
                # RemoveLayoutConversions left a use undominated for bfloat16/float16 loads
                xi = load_row(base, offs, V)
                hit = inside[:, None] & (xi[:, None] >= t[None, :])
                acc += tl.sum(tl.where(hit, exp_at(xi, m)[:, None], 0.0), 0)
                pos = n_in + tl.cumsum(inside.to(tl.int32), 0) - 1
                tl.store(buf + pos, pack(x, offs), mask=inside & (pos < CAP))
                n_in += tl.sum(inside.to(tl.int32), 0)
        if n_in > CAP:
            j = tl.max(tl.where(acc + above >= target, js, 0), 0)
            new_lo = tl.sum(tl.where(js == j, t, 0.0), 0)
            new_hi = tl.where(j + 1 < FAN, tl.sum(tl.where(js == j + 1, t, 0.0), 0), hi)
            moving = (new_lo != lo) | (new_hi != hi)
            lo = new_lo
            hi = new_hi
        rounds += 1
    return cut(buf, n_in, lo, above, m, z, p, CAP)


@triton.jit
def cut(buf, n_in, lo, above, m, z, p, CAP: tl.constexpr):
    """The nucleus boundary inside [lo, hi), whose n_in logits are in buf when they fit:
    (threshold, how many logits equal to it stay, the nucleus mass)."""
    target = p * z
    # A run of equal logits wider than buf (the interval cannot narrow further): vLLM's cut
    # inside it, where the tied tokens go from the highest id down while the weight at or below
    # them stays <= (1 - p) * z.
    threshold = lo
    q = exp_at(lo, m)
    below = tl.maximum(z - above - n_in.to(tl.float32) * q, 0.0)
    dropped = tl.floor(((1.0 - p) * z - below) / q)
    dropped = tl.minimum(tl.maximum(dropped, 0.0), (n_in - 1).to(tl.float32))
    ties = n_in - dropped.to(tl.int32)
    mass = above + ties.to(tl.float32) * q
    if n_in <= CAP:
        tl.debug_barrier()  # buf was written by the other threads of this program
        slots = tl.arange(0, CAP)
        keys = tl.sort(tl.load(buf + slots, mask=slots < n_in, other=EMPTY), 0, descending=True)
        v, _ = unpack(keys)
        w = tl.where(keys != EMPTY, exp_at(v, m), 0.0)
        cum = above + tl.cumsum(w, 0)
        first = tl.min(tl.where((cum >= target) & (slots < n_in), slots, CAP), 0)
        first = tl.where(first == CAP, n_in - 1, first)  # rounding left it short: keep all
        threshold = tl.where(n_in > 0, tl.sum(tl.where(slots == first, v, 0.0), 0), lo)
        kept = slots <= first
        # the sort put ties in id order: the kept ones at the threshold are the lowest ids
        ties = tl.sum((kept & (v == threshold)).to(tl.int32), 0)
        mass = above + tl.sum(tl.where(kept, w, 0.0), 0)
    return threshold, ties, mass


@triton.jit
def draw(base, V, threshold, ties, m, inf_mode, mass, u, BLOCK: tl.constexpr):
    """Inverse CDF in token order over the logits > threshold and the first ``ties`` logits
    == threshold, whose mass is ``mass``."""
    offs0 = tl.arange(0, BLOCK)
    goal = u * mass
    run = 0.0
    answer = -1
    last = 0
    n_eq = 0
    start = 0
    while (start < V) & (answer < 0):
        offs = start + offs0
        x = load_row(base, offs, V)
        w = tl.where(inf_mode, tl.where(x == float("inf"), 1.0, 0.0), exp_at(x, m))
        eq = (x == threshold) & (offs < V)
        rank = n_eq + tl.cumsum(eq.to(tl.int32), 0) - 1
        n_eq += tl.sum(eq.to(tl.int32), 0)
        w = tl.where((x > threshold) | (eq & (rank < ties)), w, 0.0)
        last = tl.maximum(last, tl.max(tl.where(w > 0, offs, 0), 0))
        total = tl.sum(w, 0)
        if run + total > goal:
            answer = tl.min(tl.where(run + tl.cumsum(w, 0) > goal, offs, V), 0)
        run += total
        start += BLOCK
    return tl.where(answer >= 0, answer, last)  # rounding: the last token takes the rest


@triton.jit
def _top_k_row(base, V, buf, bound, k, p, m, u, BLOCK: tl.constexpr, CAP: tl.constexpr,
               SMALL: tl.constexpr):  # fmt: skip
    # fewer than k groups hold logits above the bound: at most (k - 1) * GS of them, which the
    # caller's choice of GS keeps within CAP together with the first k ties
    count = tl.minimum(compact(base, V, buf, bound, k, True, BLOCK, CAP), CAP)
    tl.debug_barrier()  # buf was written by the other threads of this program
    if count <= SMALL:
        token = finish(buf, count, k, p, m, 1.0, u, True, SMALL)
    else:
        token = finish(buf, count, k, p, m, 1.0, u, True, CAP)
    return token


@triton.jit
def _inf_row(base, V, m, u, BLOCK: tl.constexpr):
    """+inf logits share all the mass: count them, draw among them."""
    n_inf = 0
    for start in range(0, V, BLOCK):
        x = load_row(base, start + tl.arange(0, BLOCK), V)
        n_inf += tl.sum((x == float("inf")).to(tl.int32), 0)
    return draw(base, V, float("inf"), n_inf, m, True, n_inf.to(tl.float32), u, BLOCK)


@triton.jit
def _top_p_row(base, V, buf, mode, bound, z, p, m, u, log_v, BLOCK: tl.constexpr,
               CAP: tl.constexpr, SMALL: tl.constexpr, FAN: tl.constexpr,
               ROUNDS: tl.constexpr):  # fmt: skip
    # bounds_kernel's nucleus bound, when it found one, still holds: collect above it
    count = CAP + 1
    if mode == TOP_P_ROW:
        count = compact(base, V, buf, bound, 0, False, BLOCK, CAP)
    token = 0
    if count <= CAP:
        tl.debug_barrier()
        if count <= SMALL:
            token = finish(buf, count, 0, p, m, z, u, False, SMALL)
        else:
            token = finish(buf, count, 0, p, m, z, u, False, CAP)
    else:  # a wide nucleus: search for its threshold exactly
        threshold, ties, mass = search(base, V, buf, m, z, p, log_v, BLOCK, CAP, FAN, ROUNDS)
        token = draw(base, V, threshold, ties, m, False, mass, u, BLOCK)
    return token


@triton.jit(do_not_specialize=["stride"])
def row_kernel(
    logits, stride, V, mode_ptr, bound_ptr, z_ptr, m_ptr,
    k_ptr, p_ptr, u_ptr, out, buffers, log_v, slow,
    HAS_K: tl.constexpr, HAS_P: tl.constexpr, BLOCK: tl.constexpr, CAP: tl.constexpr,
    SMALL: tl.constexpr, FAN: tl.constexpr, ROUNDS: tl.constexpr, STRIDE_UNIT: tl.constexpr = 1,
):  # fmt: skip
    """The rows finish_kernel flagged in ``slow``, each in one program; the others return.
    The row's mode, bound and normaliser come from bounds_kernel."""
    row = tl.program_id(0).to(tl.int64)
    if tl.load(slow + row) != 1:  # 0: drawn already; the wide kernels' states are not ours
        return
    base = logits + row * (stride * STRIDE_UNIT)
    buf = buffers + row * CAP
    m = tl.load(m_ptr + row)  # the row maximum (-inf rows are never slow)
    mode = tl.load(mode_ptr + row)
    bound = tl.load(bound_ptr + row)
    u = tl.load(u_ptr + row)
    k, p = row_k_p(k_ptr, p_ptr, row, V, HAS_K, HAS_P)
    if mode == TOP_K_ROW:
        token = _top_k_row(base, V, buf, bound, k, p, m, u, BLOCK, CAP, SMALL)
    elif mode == INF_ROW:
        token = _inf_row(base, V, m, u, BLOCK)
    else:  # TOP_P_ROW or WIDE_ROW
        z = tl.load(z_ptr + row)
        token = _top_p_row(
            base, V, buf, mode, bound, z, p, m, u, log_v, BLOCK, CAP, SMALL, FAN, ROUNDS
        )
    tl.store(out + row, token.to(tl.int64))
