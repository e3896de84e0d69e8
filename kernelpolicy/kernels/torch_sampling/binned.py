"""Top-p on the CPU: a histogram of the mass over bins of the distance to the row maximum
finds the bin holding the nucleus boundary, and only that bin is sorted. The host reads which
rows take which path (free on the CPU).

The vocabulary-wide passes run a few rows at a time (``CHUNK``) into the same two buffers,
which stay in cache, where whole-batch temporaries were fresh memory (page faults) for every
pass; each chunk keeps only its histogram and the tokens of two bins, and the last steps
(:mod:`.nucleus`) run once for the whole batch.

Every row's weights are ``exp(x - max)`` computed as ``2^((x - max) log2 e)``: on the CPUs we
measured, ``torch.exp2`` runs at memory speed where ``torch.exp`` takes four times as long, and
the weights are the costliest pass over the vocabulary that top-p cannot skip.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from kernelpolicy.kernels.torch_sampling import blocks, nucleus
from kernelpolicy.kernels.torch_sampling.common import draw, prepare, weights

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
CHUNK = 4  # rows per pass over the vocabulary


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


class Found(NamedTuple):
    """What a pass over rows keeps: each row's histogram and running weight over its bins,
    the bin holding its nucleus boundary, the bin its draw proposes, and the tokens of those
    two bins."""

    hist: torch.Tensor  # [batch, BINS] float64: the weight in each bin
    cum: torch.Tensor  # [batch, BINS] float64: the running weight, the row's weight last
    edge: torch.Tensor  # [batch, 1] int64: the boundary bin
    before: torch.Tensor  # [batch, 1] float64: the weight of the bins above it
    c: torch.Tensor  # [batch, 1] int64: the proposed bin
    rest: torch.Tensor  # [batch, 1] float64: how far the uniform lies into it
    sel: torch.Tensor  # [n] int64: flat positions of the two bins' tokens, ascending
    group: torch.Tensor  # [n] int64: 1 for the proposed bin's where it is not the boundary
    x: torch.Tensor  # [n] float32: their logits
    w: torch.Tensor  # [n] float32: their weights


def top_p(logits: torch.Tensor, p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Top-p over the whole vocabulary on the CPU, with no sort at vocabulary size.

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
    p64 = p.double().unsqueeze(-1)
    every = bool((p < 1.0).all())
    ids = torch.zeros(batch, dtype=torch.int64)
    t = torch.empty(min(CHUNK, batch), vocab)
    w = torch.empty_like(t)
    hist = torch.empty(batch, BINS, dtype=torch.float64)  # every chunk's rows in turn
    cum = torch.empty_like(hist)
    found, cut, done = [], [], 0
    for first in range(0, batch, CHUNK):
        last = min(first + CHUNK, batch)
        x = logits[first:last].float().contiguous()  # no copy for contiguous float32
        m = x.amax(dim=-1, keepdim=True)
        here = torch.arange(last - first)
        if not (every and bool(torch.isfinite(m).all())):  # NaN, infinities, p = 1: rare
            x, m, here = _set_aside(x, m, p[first:last], u[first:last], ids[first:last])
        n = here.numel()
        if n:
            r = rows(x, t[:n], w[:n], m)
            at = here + first
            found.append(scan(r, p64[at], u[at], hist[done : done + n], cum[done : done + n]))
            cut.append(at)
            done += n
    if found:
        at = torch.cat(cut)
        ids[at] = finish(_joined(found, vocab, hist[:done], cum[:done]), p64[at], logits, at)
    return ids


def _set_aside(
    x: torch.Tensor, m: torch.Tensor, p: torch.Tensor, u: torch.Tensor, ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Repair NaN in a chunk and draw into ``ids`` its rows without top-p or with a
    non-finite maximum. Returns the rows left for the histogram: their logits, maxima and
    indices in the chunk."""
    if bool(m.isnan().any()):  # a NaN makes its row's maximum NaN
        x = prepare(x)
        m = x.amax(dim=-1, keepdim=True)
    finite = torch.isfinite(m.squeeze(-1))
    whole = (finite & (p >= 1.0)).nonzero().squeeze(-1)
    if whole.numel():  # no top-p
        ids[whole] = draw(weights(x[whole])[0], u[whole])
    rest = (~finite).nonzero().squeeze(-1)
    if rest.numel():  # +inf logits, or nothing finite
        ids[rest] = blocks.top_p(x[rest], p[rest], u[rest])
    here = (finite & (p < 1.0)).nonzero().squeeze(-1)
    return x[here], m[here], here


def _joined(found: list[Found], vocab: int, hist: torch.Tensor, cum: torch.Tensor) -> Found:
    """The chunks' findings as one (their ``hist`` and ``cum`` already written, in order, to
    the rows of ``hist`` and ``cum``), their flat positions moved past the rows before."""
    starts = torch.tensor([0] + [f.edge.shape[0] for f in found[:-1]]).cumsum(0) * vocab
    shifted = [f._replace(sel=f.sel + int(s)) for f, s in zip(found, starts, strict=True)]
    parts = [torch.cat(part) for part in list(zip(*shifted, strict=True))[2:]]
    return Found(hist, cum, *parts)


def _bins(r: Rows) -> torch.Tensor:
    """Each token's bin, offset by its row by ``BINS``: ``int32 [batch, vocab]`` in the memory
    of ``r.t``, which it overwrites."""
    batch = r.t.shape[0]
    flat = r.t.clamp_(_NEAR, _FAR).view(torch.int32).bitwise_right_shift_(SHIFT)  # in place
    flat += torch.arange(-_FIRST, batch * BINS - _FIRST, BINS, dtype=torch.int32).unsqueeze(-1)
    return flat


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
    found = mask.view(-1, 8).index_select(0, words).view(-1)
    at = found.nonzero().squeeze(-1)
    sel = words.index_select(0, at >> 3) * 8 + (at & 7)
    return sel, (found.index_select(0, at) == 2).long()


def scan(
    r: Rows,
    p: torch.Tensor,
    u: torch.Tensor,
    hist: torch.Tensor | None = None,
    cum: torch.Tensor | None = None,
) -> Found:
    """One pass over rows of finite maximum: the histogram of their weights over bins of the
    distance to the maximum, the bin holding each row's nucleus boundary, the bin its draw
    proposes (the boundary bin counted whole), and the tokens of both.

    One flat ``bincount`` over int32 bins: on the CPU it takes about 70% of an ``index_add_``'s
    time, and converting the bins to the int64 index that ``scatter_add_`` needs costs what
    that saves.

    Args:
        r: The rows (``r.t`` is overwritten).
        p: ``float64 [batch, 1]`` in ``(0, 1)``.
        u: ``float64 [batch, 1]`` uniforms.
        hist: ``float64 [batch, BINS]`` to write the histogram into, or ``None``.
        cum: ``float64 [batch, BINS]`` to write the running weight into, or ``None``.

    Returns:
        The findings, positions flat in ``[batch, vocab]``.
    """
    batch = r.x.shape[0]
    flat = _bins(r)
    counted = torch.bincount(flat.view(-1), r.w.view(-1), minlength=batch * BINS)
    if hist is None:
        hist = counted.view(batch, BINS).double()
    else:
        hist.copy_(counted.view(batch, BINS))
    cum = torch.cumsum(hist, dim=-1, out=cum) if cum is not None else hist.cumsum(dim=-1)
    total = cum[:, -1:]
    # vLLM drops a token when the weight at or below it is <= (1 - p) * total, so the
    # boundary bin is the last one whose top token stays: one past the bins after which
    # more than that much is left (the running weight only grows, so they come first)
    edge = (total - cum[:, :-1] > (1.0 - p) * total).sum(dim=-1, keepdim=True)
    before = cum.gather(1, (edge - 1).clamp(min=0)).masked_fill_(edge == 0, 0.0)
    c, rest = _propose(hist, cum, edge, u)
    offset = torch.arange(0, batch * BINS, BINS).unsqueeze(-1)
    sel, group = _two_bins(flat, (edge + offset).int(), (c + offset).int())
    x, w = r.x.view(-1).index_select(0, sel), r.w.view(-1).index_select(0, sel)
    return Found(hist, cum, edge, before, c, rest, sel, group, x, w)


def _propose(
    hist: torch.Tensor, cum: torch.Tensor, edge: torch.Tensor, u: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """A bin drawn in proportion to its weight among the bins up to ``edge`` (the boundary bin
    whole) by the uniforms ``u``, and how far ``u`` lies into it. Rounding never proposes an
    empty bin: the running weight steps only at non-empty ones, and ``edge`` is one.

    Returns:
        ``(bin, rest)``, both ``[batch, 1]`` (int64 and float64).
    """
    goal = u * cum.gather(1, edge)
    c = torch.searchsorted(cum, goal, right=True).minimum(edge)
    return c, (goal - (cum.gather(1, c) - hist.gather(1, c))).clamp_(min=0.0)


def finish(f: Found, p: torch.Tensor, logits: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
    """The draw of every row from its findings: sort its boundary bin, take the proposed
    token, and redraw the rows whose proposal landed on a dropped token of the boundary bin.

    Args:
        f: The findings of all rows.
        p: ``float64 [batch, 1]``.
        logits: The logits the rows came from, rows ``at`` (for the redraws).
        at: ``int64 [batch]``.

    Returns:
        ``int64 [batch]`` tokens.
    """
    shape = (f.edge.shape[0], logits.shape[-1])
    ids, x, w = nucleus.packed(f.sel, f.group, shape, f.x, f.w)  # the boundary bin, the other
    e = nucleus.edge((ids[:, 0], x[:, 0], w[:, 0]), f.before, f.cum[:, -1:], p)
    mass = f.hist.gather(1, f.c)
    tokens, rejected, u = nucleus.tokens(e, f.c == f.edge, f.rest, mass, ids[:, 1], w[:, 1])
    again = rejected.nonzero().squeeze(-1)
    _redraw(tokens, again, u, e=e, f=f, logits=logits, at=at)
    return tokens


def _redraw(
    tokens: torch.Tensor,
    again: torch.Tensor,
    u: torch.Tensor,
    *,
    e: nucleus.Edge,
    f: Found,
    logits: torch.Tensor,
    at: torch.Tensor,
) -> None:
    """Fill ``tokens`` of the rejected rows ``again`` by new proposals from the rest of their
    uniforms ``u``, each row alone (rare: the odds are the dropped weight of the boundary bin).
    A proposal of the boundary bin needs nothing more than its sorted tokens; for another bin,
    the row's bins and weights are computed again from ``logits`` (the same operations on the
    same values). Still rejected after ``_REDRAWS`` proposals (odds of at most
    (1 - p)^_REDRAWS), a row keeps the last kept token of the boundary bin, which its last
    proposal came to."""
    vocab = logits.shape[-1]
    for _ in range(_REDRAWS):
        if not again.numel():
            return
        hist, edge = f.hist[again], f.edge[again]
        c, rest = _propose(hist, f.cum[again], edge, u[again])
        at_edge = c == edge
        off = (~at_edge).squeeze(-1).nonzero().squeeze(-1)  # these need their row again
        ids = torch.full((again.numel(), 1), -1, dtype=torch.int64)
        weights = torch.zeros(again.numel(), 1)
        if off.numel():
            r = rows(prepare(logits.index_select(0, at[again[off]])))
            offset = torch.arange(0, off.numel() * BINS, BINS).unsqueeze(-1)
            sel = (_bins(r) == (c[off] + offset).int()).view(-1).nonzero().squeeze(-1)
            shape = (off.numel(), vocab)
            found, w = nucleus.packed(sel, torch.ones_like(sel), shape, r.w.view(-1)[sel])
            ids = ids.expand(-1, found.shape[-1]).index_copy(0, off, found[:, 1])
            weights = weights.expand(-1, w.shape[-1]).index_copy(0, off, w[:, 1])
        sub = nucleus.Edge(*(t[again] for t in e))
        tokens[again], rejected, u[again] = nucleus.tokens(
            sub, at_edge, rest, hist.gather(1, c), ids, weights
        )
        again = again[rejected]


def binned(r: Rows, p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Top-p for rows of finite maximum in one pass (``top_p`` runs chunks of them): a
    histogram of the weights over bins of the distance to the maximum finds the bin holding
    the nucleus boundary, and only that bin is sorted.

    The draw proposes a bin by the histogram, the boundary bin whole, so that one pass over
    the row extracts both the boundary bin and the proposed one; a proposal that lands on a
    dropped token of the boundary bin is redrawn from the rest of its uniform (exact: the
    accepted draws are uniform over the kept weight), which the few such rows repeat alone.

    Args:
        r: Rows of finite maximum (``r.t`` is overwritten).
        p: ``[batch]`` in ``(0, 1)``.
        u: ``float64 [batch, 1]`` uniforms.

    Returns:
        ``int64 [batch]`` tokens.
    """
    p64 = p.to(torch.float64).reshape(-1, 1)
    return finish(scan(r, p64, u), p64, r.x, torch.arange(r.x.shape[0]))
