"""Top-p on the CPU: a histogram of the mass over bins of the distance to the row maximum
finds the bin holding the nucleus boundary, and only that bin is sorted. The host reads which
rows take which path (free on the CPU).

Every row's weights are ``exp(x - max)`` computed as ``2^((x - max) log2 e)``: on the CPUs we
measured, ``torch.exp2`` runs at memory speed where ``torch.exp`` takes four times as long, and
the weights are the costliest pass over the vocabulary that top-p cannot skip.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from kernelpolicy.kernels.torch_sampling import blocks
from kernelpolicy.kernels.torch_sampling.common import draw, pick, prepare, weights

LOG2E = 1.4426950408889634
# Bins of the float32 distance t to the row maximum, clamped to [2^-10, 2^7] (closer tokens
# share the first bin; farther ones weigh nothing in float32): t's bits without the last SHIFT
# ones (the sign is 0, then 8 exponent bits and 8 mantissa bits), 256 bins per octave of the
# distance, monotone in it, in one shift
SHIFT = 15
_NEAR, _FAR = 2.0**-10, 2.0**7
_FIRST = (127 - 10) << (23 - SHIFT)  # the bin of _NEAR
_REDRAWS = 64
SHORT = 4096  # rows up to this long are sorted whole (the histogram has BINS cells per row)
BINS = ((127 + 7) << (23 - SHIFT)) + 1 - _FIRST
CHUNK = 8  # rows per pass over the vocabulary (see top_p)


class Rows(NamedTuple):
    """Logits with their distance to the row maximum and their weights."""

    x: torch.Tensor  # [batch, vocab] float32, NaN as -inf
    t: torch.Tensor  # [batch, vocab] max - x, >= 0 (+inf for -inf) where the max is finite
    w: torch.Tensor  # [batch, vocab] exp(-t)
    m: torch.Tensor  # [batch, 1] the row maximum


def rows(
    x: torch.Tensor,
    t: torch.Tensor | None = None,
    w: torch.Tensor | None = None,
    m: torch.Tensor | None = None,
) -> Rows:
    """The distances and weights of NaN-free float32 rows ``x``, written into ``t`` and ``w``
    (``x``'s shape) where given; ``m``: the rows' maxima, where known."""
    m = x.amax(dim=-1, keepdim=True) if m is None else m
    t = torch.sub(m, x, out=t) if t is not None else torch.sub(m, x)
    w = torch.mul(t, -LOG2E, out=w) if w is not None else torch.mul(t, -LOG2E)
    return Rows(x, t, w.exp2_(), m)


def top_p(logits: torch.Tensor, p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Top-p over the whole vocabulary on the CPU, with no sort at vocabulary size.

    Rows go through in chunks of ``CHUNK``: every pass over a chunk writes into the same two
    ``[CHUNK, vocab]`` buffers, which stay in cache, where whole-batch temporaries would be
    fresh memory (page faults) for every pass.

    Args:
        logits: ``[batch, vocab]`` logits of any float dtype; NaN is never drawn.
        p: ``[batch]`` top-p per row (``>= 1``: none).
        u: ``float64 [batch, 1]`` uniforms.

    Returns:
        ``int64 [batch]`` token ids.
    """
    batch, vocab = logits.shape
    if vocab <= SHORT:  # a short row: sorting it whole costs less than the histogram
        return blocks.top_p(prepare(logits), p, u, block=SHORT, probes=blocks.PROBES)
    p = p.to(logits.device, torch.float32).reshape(-1)
    ids = torch.empty(batch, dtype=torch.int64)
    t = torch.empty(min(CHUNK, batch), vocab)
    w = torch.empty_like(t)
    for first in range(0, batch, CHUNK):
        last = min(first + CHUNK, batch)
        n = last - first
        ids[first:last] = _chunk(logits[first:last], p[first:last], u[first:last], t[:n], w[:n])
    return ids


def _chunk(
    logits: torch.Tensor, p: torch.Tensor, u: torch.Tensor, t: torch.Tensor, w: torch.Tensor
) -> torch.Tensor:
    """Top-p of a few rows, their distances and weights written into ``t`` and ``w``."""
    x = logits.float().contiguous()  # no copy for contiguous float32
    m = x.amax(dim=-1, keepdim=True)
    if bool(m.isnan().any()):  # a NaN makes its row's maximum NaN: repair this chunk only
        x = prepare(x)
        m = x.amax(dim=-1, keepdim=True)
    r = rows(x, t, w, m)
    finite = torch.isfinite(r.m.squeeze(-1))
    cut = (finite & (p < 1.0)).nonzero().squeeze(-1)
    if cut.numel() == x.shape[0]:  # the common case: every row filtered
        return binned(r, p, u)
    ids = torch.zeros(x.shape[0], dtype=torch.int64)
    if cut.numel():
        ids[cut] = binned(Rows(x[cut], r.t[cut], r.w[cut], r.m[cut]), p[cut], u[cut])
    whole = (finite & (p >= 1.0)).nonzero().squeeze(-1)
    if whole.numel():  # no top-p
        ids[whole] = draw(weights(x[whole])[0], u[whole])
    rest = (~finite).nonzero().squeeze(-1)
    if rest.numel():  # +inf logits, or nothing finite
        ids[rest] = blocks.top_p(x[rest], p[rest], u[rest])
    return ids


class _Edge(NamedTuple):
    """The boundary bin's tokens in descending order, ties by lower id (padding last)."""

    ids: torch.Tensor  # [batch, width] int64, -1 for padding
    cum: torch.Tensor  # [batch, width] float64 running weight
    kept: torch.Tensor  # [batch, 1] int64: the kept prefix (at least 1)
    size: torch.Tensor  # [batch, 1] int64: the bin's tokens


def _packed(
    sel: torch.Tensor, group: torch.Tensor, shape: torch.Size, *tensors: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """The entries at flat positions ``sel`` (ascending) of ``[batch, vocab]`` tensors, packed to
    the left of each row and ``group`` (0 or 1) in id order, with their ids; the padding has
    id -1 and zeros elsewhere. Flat 1-D indexing takes torch's fast paths.

    Returns:
        ``[batch, 2, width]`` ids, then each tensor's entries.
    """
    batch, vocab = shape
    rows = sel.div(vocab, rounding_mode="floor")
    slot = rows * 2 + group
    counts = torch.bincount(slot, minlength=2 * batch)
    width = max(int(counts.max()), 1)
    # the rank of each entry among its row's entries of its group
    seen = torch.stack([torch.cumsum(1 - group, 0), torch.cumsum(group, 0)]).gather(
        0, group.unsqueeze(0)
    )[0]
    before = torch.cumsum(counts.view(batch, 2), 0) - counts.view(batch, 2)  # in earlier rows
    dest = slot * width + seen - 1 - before.view(-1)[slot]
    ids = torch.full((2 * batch * width,), -1, dtype=torch.int64)
    out = [ids.index_copy_(0, dest, sel - rows * vocab).view(batch, 2, width)]
    for t in tensors:
        packed = torch.zeros(2 * batch * width, dtype=t.dtype)
        out.append(packed.index_copy_(0, dest, t.view(-1).index_select(0, sel)).view(batch, 2, width))
    return tuple(out)


def _two_bins(
    flat: torch.Tensor, a: torch.Tensor, b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The flat positions (ascending) where ``flat`` equals its row's ``a`` or ``b``
    (``[batch, 1]``), and for each whether it is ``b``'s alone (int64 0 or 1).

    The comparisons write bytes (into bool, torch's comparisons run elementwise, several times
    slower) and ``nonzero`` reads them as 64-bit words: it costs little per word it skips and
    much per entry it scans, so it scans an eighth of the entries, and only the few words that
    hold a hit are opened byte by byte.
    """
    n = flat.numel()
    mask = torch.zeros(-(-n // 8) * 8, dtype=torch.uint8)  # padded with zeros to whole words
    hit, other = mask[:n].view(flat.shape), torch.empty(flat.shape, dtype=torch.uint8)
    torch.eq(flat, a, out=hit)
    hit.add_(torch.eq(flat, b, out=other), alpha=2)  # 1: a's, 2: b's alone, 3: both (a = b)
    words = mask.view(torch.int64).nonzero().squeeze(-1)
    found = mask.view(-1, 8).index_select(0, words)
    at = found.nonzero()
    sel = words.index_select(0, at[:, 0]) * 8 + at[:, 1]
    return sel, (found[at[:, 0], at[:, 1]] == 2).long()


def _histogram(r: Rows) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token's bin, offset by its row (``int32 [batch, vocab]``, in the memory of ``r.t``,
    which it overwrites), and each row's weight
    per bin (``float64 [batch, BINS]``). int32 and a flat ``index_add_``: converting to the
    int64 index that ``scatter_add_`` needs costs more than the histogram itself on a CPU."""
    batch = r.t.shape[0]
    flat = r.t.clamp_(_NEAR, _FAR).view(torch.int32).bitwise_right_shift_(SHIFT)  # in place
    flat += torch.arange(-_FIRST, batch * BINS - _FIRST, BINS, dtype=torch.int32).unsqueeze(-1)
    hist = torch.zeros(batch * BINS).index_add_(0, flat.view(-1), r.w.view(-1))
    return flat, hist.view(batch, BINS).double()


def _edge(
    packed: tuple[torch.Tensor, ...], before: torch.Tensor, total: torch.Tensor, p: torch.Tensor
) -> _Edge:
    """Sort the boundary bin (packed in id order: one stable sort by value keeps ties so) and
    find its kept prefix by vLLM's rule, ``before`` being the weight of the bins above it."""
    ids, values, w = packed
    perm = values.masked_fill(ids < 0, float("-inf")).sort(dim=-1, descending=True, stable=True)[1]
    ids, w = ids.gather(1, perm), w.gather(1, perm).double()
    cum = torch.cumsum(w, dim=-1)
    keep = (total - (before + cum - w) > (1.0 - p) * total) & (ids >= 0)
    keep[:, 0] = True
    count = (ids >= 0).sum(dim=-1, keepdim=True)
    return _Edge(ids, cum, keep.sum(dim=-1, keepdim=True), count)


def _tokens(
    e: _Edge, at_edge: torch.Tensor, rest: torch.Tensor, mass: torch.Tensor, *inner: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The token at ``rest`` into the proposed bin (of weight ``mass``; ``inner``: its packed
    ids and weights where it is not the boundary bin). A proposal on a dropped token of the
    boundary bin is rejected, with the rest of its uniform for the next proposal.

    Returns:
        ``(tokens, rejected, next_u)``.
    """
    pos = torch.searchsorted(e.cum, rest, right=True)
    kept, whole = e.cum.gather(1, e.kept - 1), e.cum.gather(1, (e.size - 1).clamp(min=0))
    # the dropped tokens weigh nothing: only rounding put rest past the kept ones
    accepted = (pos < e.kept) | (e.kept >= e.size) | (whole <= kept)
    token = e.ids.gather(1, pos.minimum(e.kept - 1))
    ids, w = inner
    fraction = (rest / mass.clamp(min=1e-300)).clamp(0.0, 1.0)
    token = torch.where(at_edge, token, ids.gather(1, draw(w, fraction).unsqueeze(-1)))
    next_u = ((rest - kept) / (whole - kept).clamp(min=1e-300)).clamp(0.0, 1.0 - 2.0**-53)
    return token.squeeze(-1).clamp(min=0), (at_edge & ~accepted).squeeze(-1), next_u


def _redraw(
    tokens: torch.Tensor,
    again: torch.Tensor,
    u: torch.Tensor,
    *,
    e: _Edge,
    flat: torch.Tensor,
    outer: torch.Tensor,
    edge: torch.Tensor,
    w: torch.Tensor,
) -> None:
    """Fill ``tokens`` of the rejected rows ``again`` by new proposals from the rest of their
    uniforms ``u``, each row alone (rare: the odds are the dropped weight of the boundary bin).
    Still rejected after ``_REDRAWS`` proposals (odds of at most (1 - p)^_REDRAWS), a row keeps
    the last kept token of the boundary bin, which its last proposal came to."""
    offset = torch.arange(0, flat.shape[0] * BINS, BINS).unsqueeze(-1)
    for _ in range(_REDRAWS):
        if not again.numel():
            return
        c, rest = pick(outer[again], u[again] * outer[again].sum(dim=-1, keepdim=True))
        at_edge = c == edge[again]
        mask = flat[again] == (c + offset[again]).masked_fill(at_edge, -1).int()
        sel = mask.view(-1).nonzero().squeeze(-1)
        ids, weights = _packed(sel, torch.ones_like(sel), mask.shape, w[again])
        sub = _Edge(*(t[again] for t in e))
        tokens[again], rejected, u[again] = _tokens(
            sub, at_edge, rest, outer[again].gather(1, c), ids[:, 1], weights[:, 1]
        )
        again = again[rejected]


def binned(r: Rows, p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Top-p for rows of finite maximum: a histogram of the weights over bins of the distance
    to the maximum finds the bin holding the nucleus boundary, and only that bin is sorted.

    The draw proposes a bin by the histogram, the boundary bin whole, so that one pass over
    the row extracts both the boundary bin and the proposed one; a proposal that lands on a
    dropped token of the boundary bin is redrawn from the rest of its uniform (exact: the
    accepted draws are uniform over the kept weight), which the few such rows repeat alone.

    Args:
        r: Rows of finite maximum.
        p: ``[batch]`` in ``(0, 1)``.
        u: ``float64 [batch, 1]`` uniforms.

    Returns:
        ``int64 [batch]`` tokens.
    """
    batch, vocab = r.x.shape
    flat, hist = _histogram(r)
    offset = torch.arange(0, batch * BINS, BINS).unsqueeze(-1)
    total = hist.sum(dim=-1, keepdim=True)
    p = p.to(torch.float64).reshape(-1, 1)
    above = torch.cumsum(hist, dim=-1) - hist  # weight in the bins before each one
    # vLLM drops a token when the weight at or below it is <= (1 - p) * total; the boundary
    # bin is the last one whose top token stays
    edge = ((total - above > (1.0 - p) * total) & (hist > 0)).long().cumsum(-1).argmax(-1)
    edge = edge.unsqueeze(-1)
    outer = hist.masked_fill(torch.arange(BINS) > edge, 0.0)  # bins above it, and it whole
    c, rest = pick(outer, u * outer.sum(dim=-1, keepdim=True))
    edge_at, c_at = (edge + offset).int(), (c + offset).int()  # int32 compares: no copies
    sel, group = _two_bins(flat, edge_at, c_at)
    ids, x, w = _packed(sel, group, r.x.shape, r.x, r.w)  # the boundary bin, the proposed one
    e = _edge((ids[:, 0], x[:, 0], w[:, 0]), above.gather(1, edge), total, p)
    inner = ids[:, 1], w[:, 1]
    tokens, rejected, u = _tokens(e, c == edge, rest, outer.gather(1, c), *inner)
    again = rejected.nonzero().squeeze(-1)
    _redraw(tokens, again, u, e=e, flat=flat, outer=outer, edge=edge, w=r.w)
    return tokens
