"""Top-p on the CPU: the largest logits where they hold the nucleus, else a histogram of the
mass that sorts only the bin holding the boundary (the host reads which rows take which path:
free on the CPU)."""

from __future__ import annotations

import torch

from kernelpolicy.kernels.torch_sampling.common import draw, finite_or_zero, stable_descending

SHORTLIST = 256  # candidates tried before the histogram


def top_p_shortlist(x: torch.Tensor, p: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Top-p from the ``SHORTLIST`` largest logits, where they decide the nucleus (CPU only: it
    reads on the host which rows they decide).

    The nucleus lies inside the candidates strictly above the last one's value when their mass
    reaches ``p``; other rows (and rows with ``+inf`` or ``p >= 1``) are left to the caller.

    Returns:
        ``(ids, decided)``: ``int64 [batch]`` tokens and the ``bool [batch]`` rows they hold.
    """
    values, ids = stable_descending(*torch.topk(x, min(SHORTLIST, x.shape[-1]), dim=-1))
    m = values[:, :1]
    lse = torch.logsumexp(x, dim=-1, keepdim=True)
    total = torch.exp((lse - finite_or_zero(m)).to(torch.float64))
    e = torch.exp((values - finite_or_zero(m)).to(torch.float64))
    p = p.to(device=x.device, dtype=torch.float64).reshape(-1, 1)
    above = (e * (values > values[:, -1:])).sum(dim=-1, keepdim=True)
    before = torch.cumsum(e, dim=-1) - e
    drop = total - before <= (1.0 - p) * total
    drop[:, 0] = False
    token = ids.gather(1, draw(e.masked_fill(drop, 0.0), u).unsqueeze(-1)).squeeze(-1)
    empty = torch.isneginf(m).squeeze(-1)
    decided = ((above >= p * total) & (p < 1.0) & torch.isfinite(m)).squeeze(-1) | empty
    return token.masked_fill(empty, 0), decided


BINS, BIN_SPAN = 4096, 48.0  # the CPU's histogram: logits within BIN_SPAN of the maximum


def _packed(mask: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The entries where ``mask`` holds, packed to the left of each row (CPU), with the column
    ids; the padding has id -1 and zeros elsewhere."""
    rows, cols = mask.nonzero(as_tuple=True)
    counts = torch.bincount(rows, minlength=mask.shape[0])
    width = max(int(counts.max()), 1)
    pos = torch.arange(rows.numel()) - (torch.cumsum(counts, 0) - counts)[rows]
    out = [torch.full((mask.shape[0], width), -1, dtype=torch.int64)]
    out[0][rows, pos] = cols
    for t in tensors:
        packed = torch.zeros(mask.shape[0], width, dtype=t.dtype)
        packed[rows, pos] = t[rows, cols]
        out.append(packed)
    return tuple(out)


def top_p_binned(x: torch.Tensor, p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Top-p on the CPU for rows of finite maximum: a histogram of the weights over BINS bins
    of the logits' distance to the maximum finds the bin holding the nucleus boundary; only
    that bin's tokens are sorted, and the draw picks a bin, then a token inside it.

    Args:
        x: ``[batch, vocab]`` NaN-free float32 logits, each row with a finite maximum.
        p: ``[batch]`` in ``(0, 1)``.
        u: ``float64 [batch, 1]`` uniforms.

    Returns:
        ``int64 [batch]`` tokens.
    """
    batch = x.shape[0]
    y = x - x.amax(dim=-1, keepdim=True)
    w = torch.exp(y)
    # 0: the bin of the maximum; -inf: the last. int32 and a flat index_add_: converting to
    # the int64 index that scatter_add_ needs costs more than the histogram itself on a CPU
    bins = y.mul_(-BINS / BIN_SPAN).clamp_(max=BINS - 1).to(torch.int32)
    flat = bins + torch.arange(0, batch * BINS, BINS, dtype=torch.int32).unsqueeze(-1)
    hist = torch.zeros(batch * BINS).index_add_(0, flat.view(-1), w.view(-1))
    hist = hist.view(batch, BINS).double()
    total = hist.sum(dim=-1, keepdim=True)
    p = p.to(torch.float64).reshape(-1, 1)
    above = torch.cumsum(hist, dim=-1) - hist  # weight in the bins before each one
    # vLLM drops a token when the weight at or below it is <= (1 - p) * total; the boundary
    # bin is the last one whose top token stays
    edge = ((total - above > (1.0 - p) * total) & (hist > 0)).long().cumsum(-1).argmax(-1)
    edge = edge.unsqueeze(-1)
    ids, values, weights = _packed(bins == edge, x, w)
    vocab = x.shape[-1]
    values = values.masked_fill(ids < 0, float("-inf"))
    _, ids, perm = stable_descending(values, ids.masked_fill(ids < 0, vocab), with_order=True)
    weights = weights.gather(1, perm).double()
    before = above.gather(1, edge) + torch.cumsum(weights, dim=-1) - weights
    keep = (total - before > (1.0 - p) * total) & (ids < vocab)
    keep[:, 0] = True
    bin_mass = hist.masked_fill(torch.arange(BINS) >= edge, 0.0)  # the bins above the edge
    mass = torch.cat([bin_mass, torch.where(keep, weights, 0.0)], dim=-1)
    pick = draw(mass, u)  # a bin above the boundary bin, or a kept token of the boundary bin
    in_edge = (pick >= BINS).unsqueeze(-1)
    token = ids.gather(1, (pick.unsqueeze(-1) - BINS).clamp(min=0))
    # a bin above the boundary: the token inside it, by the rest of the uniform
    chosen = pick.unsqueeze(-1).clamp(max=BINS - 1)
    cum = torch.cumsum(mass, dim=-1)
    start = cum.gather(1, chosen) - mass.gather(1, chosen)
    rest = ((u * cum[:, -1:] - start) / mass.gather(1, chosen).clamp(min=1e-300)).clamp(0, 1)
    inner_ids, inner_w = _packed(bins == chosen.masked_fill(in_edge, -1), w)
    inner = inner_ids.gather(1, draw(inner_w, rest).unsqueeze(-1))
    return torch.where(in_edge, token, inner).squeeze(-1)
