"""The CPU top-p's nucleus boundary, on the few tokens its pass over the vocabulary extracted:
pack them per row, sort the bin holding the boundary and find its kept prefix, and draw."""

from __future__ import annotations

from typing import NamedTuple

import torch

from kernelpolicy.kernels.torch_sampling.common import draw


class Edge(NamedTuple):
    """The boundary bin's tokens in descending order, ties by lower id (padding last)."""

    ids: torch.Tensor  # [batch, width] int64, -1 for padding
    cum: torch.Tensor  # [batch, width] float64 running weight
    kept: torch.Tensor  # [batch, 1] int64: the kept prefix (at least 1)
    size: torch.Tensor  # [batch, 1] int64: the bin's tokens


def packed(
    sel: torch.Tensor, group: torch.Tensor, shape: tuple[int, int], *values: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """Entries at flat positions ``sel`` (ascending) of a ``[batch, vocab]`` row-major layout,
    with their ``values`` (each 1-D, one per entry), packed to the left of each row and
    ``group`` (0 or 1) in id order, with their ids; the padding has id -1 and zeros elsewhere.

    Returns:
        ``[batch, 2, width]`` ids, then each of ``values`` packed alike.
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
    for v in values:
        box = torch.zeros(2 * batch * width, dtype=v.dtype)
        out.append(box.index_copy_(0, dest, v).view(batch, 2, width))
    return tuple(out)


def edge(
    bin_: tuple[torch.Tensor, ...], before: torch.Tensor, total: torch.Tensor, p: torch.Tensor
) -> Edge:
    """Sort the boundary bin (``(ids, values, weights)``) by descending value, ties by lower id,
    and find its kept prefix by vLLM's rule, ``before`` being the weight of the bins above it.

    One sort of int64 keys, the value's order in the high half and the id in the low one: a
    quarter faster on the CPU than a stable sort of the float32 values."""
    ids, values, w = bin_
    bits = (values + 0.0).view(torch.int32)  # + 0.0: -0.0 ties with 0.0
    descending = ~(bits ^ ((bits >> 31) & 0x7FFFFFFF))  # signed order of the float, reversed
    key = descending.long().bitwise_left_shift_(32).bitwise_or_(ids)
    perm = key.masked_fill_(ids < 0, torch.iinfo(torch.int64).max).sort(dim=-1)[1]
    ids, w = ids.gather(1, perm), w.gather(1, perm).double()
    cum = torch.cumsum(w, dim=-1)
    keep = (total - (before + cum - w) > (1.0 - p) * total) & (ids >= 0)
    keep[:, 0] = True
    count = (ids >= 0).sum(dim=-1, keepdim=True)
    return Edge(ids, cum, keep.sum(dim=-1, keepdim=True), count)


def tokens(
    e: Edge, at_edge: torch.Tensor, rest: torch.Tensor, mass: torch.Tensor, *inner: torch.Tensor
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
