"""The torch sampler: top-k and top-p filtering and the draw, with one tie rule and no sort at
vocabulary size.

Semantics (vLLM's, made deterministic): top-k keeps exactly ``k`` tokens, the largest logits,
and among logits tied at the k-th value the lowest token ids; top-p then keeps the smallest
prefix of the survivors, in descending order with ties broken by lower token id first, whose
probability reaches ``p`` (a token goes when the ascending cumulative probability up to and
including it is ``<= 1 - p``); ``p >= 1`` keeps everything. The kept tokens are drawn in
proportion to their probabilities.

Top-p alone finds its threshold by a radix search over the logits' ordered bits: each pass
adds every token's probability mass into one bucket per digit (``scatter_add``), so the
nucleus boundary is found exactly in two or three passes whatever the nucleus width, never
truncated to a fixed candidate count. Nothing here reads a device value on the host; the CPU
takes one shortcut (the tie ranking only where a tie is cut) where a branch is free.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

Generators = Mapping[int, torch.Generator] | None

_BUCKET_BUDGET = 1 << 22  # histogram cells per radix pass (batch x buckets), at most
_MAX_DIGIT_BITS = 16
_SPARE = 1024  # spare buckets of the later radix passes (a power of two)


def _finite_or_zero(m: torch.Tensor) -> torch.Tensor:
    return torch.where(torch.isfinite(m), m, torch.zeros_like(m))


def weights(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unnormalised softmax weights of NaN-free float32 logits, and each row's maximum.

    A row with ``+inf`` logits gives them weight 1 and the rest 0; a row with nothing finite
    gives all zeros (its caller answers token 0).
    """
    m = x.amax(dim=-1, keepdim=True)
    e = torch.exp(x - _finite_or_zero(m))
    inf_rows = torch.isposinf(m)
    return torch.where(inf_rows, (x == float("inf")).to(e.dtype), e), m


def prepare(logits: torch.Tensor) -> torch.Tensor:
    """float32 logits with NaN as -inf (never drawn)."""
    return torch.nan_to_num(
        logits.float(), nan=float("-inf"), posinf=float("inf"), neginf=float("-inf")
    )


def uniforms(batch: int, device: torch.device, generators: Generators) -> torch.Tensor:
    """One U[0, 1) per row; seeded rows use their own generator, so a seeded request draws the
    same token whatever else is in the batch."""
    u = torch.rand(batch, 1, device=device, dtype=torch.float64)
    for row, generator in (generators or {}).items():
        u[row].uniform_(generator=generator)
    return u


def draw(w: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse CDF over each row's weights ``w`` (>= 0) with the row's uniform ``u``
    (``[batch, 1]``); a row of zeros gives 0."""
    cdf = torch.cumsum(w, dim=-1, dtype=torch.float64)
    goal = u * cdf[:, -1:]
    ids = torch.searchsorted(cdf, goal, right=True).squeeze(-1)
    return ids.clamp_(max=w.shape[-1] - 1).masked_fill_(cdf[:, -1] <= 0, 0)


def ordered_keys(x: torch.Tensor) -> torch.Tensor:
    """int32 keys whose signed order is the float order of ``x`` (no NaN; -0.0 is read as
    +0.0, so that equal values share one key)."""
    bits = (x + 0.0).view(torch.int32)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


def _digit_bits(batch: int) -> int:
    bits = _MAX_DIGIT_BITS
    while bits > 8 and batch << bits > _BUCKET_BUDGET:
        bits -= 1
    return bits


def _radix_pass(
    unsigned: torch.Tensor,
    w: torch.Tensor,
    *,
    done: int,
    step: int,
    prefix: torch.Tensor,
    below: torch.Tensor,
    target: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One digit of the search: the weight of every bucket of the next ``step`` bits among the
    keys that share ``prefix``; returns the extended prefix and the weight below it."""
    shift = 32 - done - step
    digit = (unsigned >> shift) & ((1 << step) - 1)
    spread = 0
    if done:  # keys outside the prefix go to spare buckets, spread so that the GPU's atomic
        # adds do not all queue on one address
        spread = _SPARE
        spare = (1 << step) + (torch.arange(unsigned.shape[-1], device=w.device) & (spread - 1))
        digit = torch.where((unsigned >> (shift + step)) == prefix, digit, spare)
    hist = torch.zeros(w.shape[0], (1 << step) + spread, dtype=w.dtype, device=w.device)
    hist.scatter_add_(1, digit, w)
    hist = hist[:, : 1 << step]
    cum = below + torch.cumsum(hist, dim=-1, dtype=torch.float64)
    # the first bucket whose weight at or below it passes the target; rounding may leave every
    # bucket short, and then the highest non-empty one holds the boundary
    first = torch.searchsorted(cum, target, right=True)
    last = (hist > 0).cumsum(dim=-1).argmax(dim=-1, keepdim=True)
    pick = torch.minimum(first, last)
    below = torch.where(pick > 0, cum.gather(1, (pick - 1).clamp(min=0)), below)
    return (prefix << step) | pick, below


def nucleus_threshold(
    keys: torch.Tensor, w: torch.Tensor, p: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The exact top-p boundary of each row, by a radix search over ``keys``.

    Args:
        keys: ``int32 [batch, vocab]`` ordered keys of the logits.
        w: ``[batch, vocab]`` weights (unnormalised probabilities).
        p: ``float [batch, 1]``, each in ``(0, 1)``.

    Returns:
        ``(key, below, target)``: the key of the smallest kept value, the weight strictly
        below it, and ``(1 - p) * total`` (all ``[batch, 1]``; the last two float64). A token
        is dropped when the weight at or below it, in ascending order, is ``<= target``.
    """
    batch = keys.shape[0]
    bits = _digit_bits(batch)
    total = w.sum(dim=-1, keepdim=True, dtype=torch.float64)
    target = (1.0 - p.to(torch.float64)) * total
    below = torch.zeros_like(target)
    prefix = torch.zeros(batch, 1, dtype=torch.int64, device=keys.device)
    unsigned = keys.to(torch.int64) + (1 << 31)  # 0 .. 2^32 - 1, same order
    prefix, below = _radix_pass(
        unsigned, w, done=0, step=bits, prefix=prefix, below=below, target=target
    )
    if keys.device.type == "cpu":  # the later passes only need the keys in the chosen bucket
        _, unsigned, w = _packed((unsigned >> (32 - bits)) == prefix, unsigned, w)
    done = bits
    while done < 32:
        step = min(bits, 32 - done)
        prefix, below = _radix_pass(
            unsigned, w, done=done, step=step, prefix=prefix, below=below, target=target
        )
        done += step
    return (prefix - (1 << 31)).to(torch.int32), below, target


def top_p_weights(
    x: torch.Tensor, w: torch.Tensor, m: torch.Tensor, p: torch.Tensor
) -> torch.Tensor:
    """``w`` with the tokens outside each row's nucleus set to zero (rows with p >= 1 keep
    everything). Ties at the boundary keep the lowest token ids."""
    p = p.to(device=x.device, dtype=torch.float32).reshape(-1, 1)
    keys = ordered_keys(x)
    cut, below, target = nucleus_threshold(keys, w, p.clamp(max=0.999999940395))
    value = (cut ^ ((cut >> 31) & 0x7FFFFFFF)).view(torch.float32)
    one = torch.where(torch.isposinf(m), 1.0, torch.exp(value - _finite_or_zero(m)))
    tied = keys == cut
    n_tied = tied.sum(dim=-1, keepdim=True)
    # tied tokens are dropped from the highest id down while the weight at or below them
    # stays <= target (vLLM's ascending cumulative sum, ties in reverse id order)
    dropped = torch.floor((target - below) / one.to(torch.float64).clamp(min=1e-300))
    keep_ties = n_tied - dropped.clamp(min=0).to(n_tied.dtype).clamp(max=n_tied - 1)
    keep = keys > cut
    if x.device.type != "cpu" or bool((keep_ties < n_tied).any()):
        rank = torch.cumsum(tied.to(torch.float32), dim=-1)
        keep |= tied & (rank <= keep_ties)
    else:  # every tied token stays: no ranking needed
        keep |= tied
    keep |= p >= 1.0
    return torch.where(keep, w, torch.zeros((), dtype=w.dtype, device=w.device))


SHORTLIST = 256  # candidates the CPU tries before the radix search


def stable_descending(
    values: torch.Tensor, ids: torch.Tensor, *, with_order: bool = False
) -> tuple[torch.Tensor, ...]:
    """Candidates sorted by descending value, ties by ascending id (two stable sorts); with
    ``with_order``, also the permutation of the columns."""
    ids, by_id = ids.sort(dim=-1, stable=True)
    values, order = values.gather(1, by_id).sort(dim=-1, descending=True, stable=True)
    if with_order:
        return values, ids.gather(1, order), by_id.gather(1, order)
    return values, ids.gather(1, order)


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
    total = torch.exp((lse - _finite_or_zero(m)).to(torch.float64))
    e = torch.exp((values - _finite_or_zero(m)).to(torch.float64))
    p = p.to(device=x.device, dtype=torch.float64).reshape(-1, 1)
    above = (e * (values > values[:, -1:])).sum(dim=-1, keepdim=True)
    before = torch.cumsum(e, dim=-1) - e
    drop = total - before <= (1.0 - p) * total
    drop[:, 0] = False
    token = ids.gather(1, draw(e.masked_fill(drop, 0.0), u).unsqueeze(-1)).squeeze(-1)
    empty = torch.isneginf(m).squeeze(-1)
    decided = ((above >= p * total) & (p < 1.0) & torch.isfinite(m)).squeeze(-1) | empty
    return token.masked_fill(empty, 0), decided


def top_k_candidates(
    x: torch.Tensor, k: torch.Tensor, bound: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``bound`` largest logits of each row, sorted descending with ties by lower id, the
    tokens tied at each row's k-th value replaced by the lowest ids among the whole row's ties.

    Returns:
        ``(values, ids)``, both ``[batch, bound]``.
    """
    vocab = x.shape[-1]
    values, ids = torch.topk(x, min(bound + 1, vocab), dim=-1)
    kth = values.gather(1, (k - 1).clamp(0, bound - 1).unsqueeze(-1))
    # A tie at the k-th value can reach past the candidates only when the one after the last
    # equals it; the CPU checks (a free host read), the GPU always repairs: on the H100,
    # torch.topk did not return the lowest ids of a tied group (verify, 2026-11-23).
    outside = bound < vocab and (x.device.type != "cpu" or bool((values[:, bound:] == kth).any()))
    values, ids = values[:, :bound], ids[:, :bound]
    greater = (values > kth).sum(dim=-1, keepdim=True)
    if outside:
        tied = x == kth
        rank = torch.cumsum(tied.to(torch.float32), dim=-1).to(torch.int64)  # 1-based
        slot = torch.where(tied & (rank <= bound - greater), greater + rank - 1, bound)
        token = torch.arange(vocab, device=x.device).expand_as(x)
        spare = torch.cat([ids, ids[:, :1]], dim=-1)  # the last column takes the rest
        ids = spare.scatter_(1, slot, token)[:, :bound]
    values, ids = stable_descending(values, ids)
    # exactly k: the greater ones, then the ties in id order
    kept = torch.arange(bound, device=x.device) < k.unsqueeze(-1)
    return values.masked_fill(~kept, float("-inf")), ids


def top_p_mask_sorted(w: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Drop mask of the tokens outside the nucleus, on weights sorted by descending logit (ties
    already in id order): the ascending cumulative probability up to each token ``<= 1 - p``;
    the first token always stays, and ``p >= 1`` drops nothing."""
    w64 = w.to(torch.float64)
    at_or_below = w64.flip(-1).cumsum(dim=-1).flip(-1) / w64.sum(dim=-1, keepdim=True)
    p = p.to(device=w.device, dtype=torch.float64).reshape(-1, 1)
    drop = (at_or_below <= 1.0 - p) & (p < 1.0)
    drop[..., 0] = False
    return drop


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
