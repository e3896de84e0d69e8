"""Top-p over the whole vocabulary from sorted blocks: no full-row sort, no host
synchronisation, a fixed number of operations whatever the nucleus width (the GPU's path).

Each row is cut into blocks of ``block`` tokens (a block is a contiguous range of token ids),
and every block is sorted on its own: torch sorts rows of up to 4,096 elements in one kernel on
CUDA, where a full-row sort takes a segmented radix sort (11 ms at 1024 x 128256 on an H100).
With each sorted block's running mass, the mass at or below any threshold is one
``searchsorted`` per block. The boundary is then searched over the 32-bit ordered keys of
float32: each round tries ``probes`` thresholds at once, so ``ceil(32 / log2(probes + 1))``
rounds find the exact boundary value. Ties at the boundary are ranked by token id through the
blocks, and the draw picks a block, then a token inside it.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch

from kernelpolicy.kernels.torch_sampling.common import pick

BLOCK = 4096  # tokens per sorted block (at most 4,096: one sort kernel on CUDA)
# Thresholds per search round (plus one: a power of two): at batch 256 the call is bound by
# the host's launches, so fewer rounds (4 of 255) win; at 1024 by the GPU, so smaller ones (8
# of 15) win. Measured on an H100, 2026-11-23 (benchmarks/README.md, "The torch top-p").
PROBES_SMALL_BATCH, PROBES, SMALL_BATCH = 255, 15, 512
_NEG_INF_KEY = -2139095041  # the ordered keys of float32 -inf and +inf
_POS_INF_KEY = 2139095040
_LOW_BITS = 0x7FFFFFFF


class Blocks(NamedTuple):
    """A batch cut into sorted blocks."""

    x: torch.Tensor  # [batch, groups, block] the prepared logits, in id order, input dtype
    s: torch.Tensor  # [batch, groups, block] float32, each block ascending
    cum: torch.Tensor  # [batch, groups, block + 1] float64 running weight from 0, per block
    m: torch.Tensor  # [batch, 1] float32 row maximum, 0 for an empty row


class Nucleus(NamedTuple):
    """Each row's nucleus: in every block, the kept tokens are the sorted positions from
    ``start`` on (the first of them may be tokens tied at ``value``, the lowest ids first)."""

    value: torch.Tensor  # [batch, 1] float32: the smallest kept logit
    start: torch.Tensor  # [batch, groups] int64: the first kept sorted position per block
    kept: torch.Tensor  # [batch, groups] float64: the kept weight per block
    keep_ties: torch.Tensor  # [batch, 1]: the tokens at ``value`` kept in the row


def keys(v: torch.Tensor) -> torch.Tensor:
    """int64 keys whose order is the float order of float32 ``v`` (no NaN; -0.0 as +0.0)."""
    bits = (v + 0.0).view(torch.int32).to(torch.int64)
    return bits ^ ((bits >> 31) & _LOW_BITS)


def values(k: torch.Tensor) -> torch.Tensor:
    """The float32 values of int64 ordered keys (the inverse of :func:`keys`)."""
    return (k ^ ((k >> 31) & _LOW_BITS)).to(torch.int32).view(torch.float32)


@functools.lru_cache(maxsize=64)
def block_size(vocab: int, block: int) -> int:
    """The block length for rows of ``vocab`` tokens and blocks of at most ``block``: a short
    row is one block; otherwise the largest divisor of ``vocab`` from ``block / 2`` to
    ``block``, so that no padding copy is needed (128,256 tokens: 32 blocks of 4,008; on an
    H100 at batch 1024, sorting them takes 4.3 ms where padding to 4,096 and sorting took 4.9,
    benchmarks/README.md), else ``block`` (the last block padded)."""
    if vocab <= block:
        return vocab
    return next((d for d in range(block, (block + 1) // 2 - 1, -1) if vocab % d == 0), block)


def sorted_blocks(logits: torch.Tensor, block: int = BLOCK) -> Blocks:
    """The logits (NaN as -inf) cut into ascending blocks, with their running weights.

    In a row with ``+inf`` logits those tokens share all the mass: they become ``0.0`` and
    every other token ``-inf``, by a mask (a stand-in value such as the dtype's largest would
    tie with a real logit of that value and give it a share).
    """
    rows, vocab = logits.shape
    block = block_size(vocab, block)
    groups = -(-vocab // block)
    inf = float("inf")
    x = torch.nan_to_num(logits, nan=-inf, posinf=inf, neginf=-inf)  # infinities kept
    top = torch.isposinf(x)
    x = torch.where(top.any(dim=-1, keepdim=True), torch.where(top, 0.0, float("-inf")), x)
    if groups * block != vocab:
        x = torch.nn.functional.pad(x, (0, groups * block - vocab), value=float("-inf"))
    x = x.view(rows, groups, block)
    s = x.sort(dim=-1).values.float()
    m = s[..., -1].amax(dim=-1, keepdim=True).nan_to_num_(neginf=0.0)
    # the weights go after a zero column, so that the running sum at a count is one gather
    w = torch.empty(rows, groups, block + 1, device=s.device)
    w[..., 0] = 0.0
    torch.sub(s, m.unsqueeze(-1), out=w[..., 1:]).exp_()
    return Blocks(x, s, w.cumsum(dim=-1, dtype=torch.float64), m)


def _at_or_below(b: Blocks, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per block, the count and the weight of the tokens ``<= v`` for thresholds ``v``
    (``float32 [batch, q]``); both ``[batch, groups, q]``."""
    rows, groups, _ = b.s.shape
    v = v.unsqueeze(1).expand(rows, groups, v.shape[-1]).contiguous()
    count = torch.searchsorted(b.s, v, right=True)
    return count, b.cum.gather(-1, count)


def _spans(probes: int) -> list[int]:
    """Each round's gap between probes, shrinking by ``probes + 1`` (a power of two) from at
    least 2^32 to 1."""
    bits = (probes + 1).bit_length() - 1
    if probes < 1 or 1 << bits != probes + 1:
        raise ValueError(f"probes + 1 must be a power of two, got {probes}")
    return [1 << (bits * r) for r in range(-(-32 // bits) - 1, -1, -1)]


def _boundary_key(b: Blocks, target: torch.Tensor, probes: int) -> torch.Tensor:
    """The smallest key whose value has more than ``target`` weight at or below it.

    Invariant: ``weight(<= lo) <= target < weight(<= lo + span)``, from ``lo`` = the key of
    -inf (no weight) and ``span`` >= 2^32; each round tries ``probes`` evenly spaced keys in
    between (the ones past +inf read as +inf: all the weight) and moves ``lo`` to the last one
    still ``<= target``, until ``span`` is 1.
    """
    lo = torch.full_like(target, _NEG_INF_KEY, dtype=torch.int64)
    steps = torch.arange(1, probes + 1, device=b.s.device)
    for span in _spans(probes):
        probe = torch.add(lo, steps, alpha=span).clamp_(max=_POS_INF_KEY)
        weight = _at_or_below(b, values(probe))[1].sum(dim=1)
        lo = lo.add_((weight <= target).sum(dim=-1, keepdim=True), alpha=span)
    return (lo + 1).clamp_(max=_POS_INF_KEY)


def nucleus(b: Blocks, p: torch.Tensor, probes: int = PROBES) -> Nucleus:
    """Each row's nucleus: the smallest prefix of the descending order (ties by lower id) whose
    probability reaches ``p``, by vLLM's rule (a token goes when the ascending cumulative
    probability up to and including it is ``<= 1 - p``); ``p >= 1`` keeps every token of
    non-zero weight.

    Args:
        b: The sorted blocks.
        p: ``[batch]`` top-p per row.
        probes: Thresholds tried per search round.

    Returns:
        The boundary and the kept weight of every block.
    """
    p = p.to(device=b.s.device, dtype=torch.float64).reshape(-1, 1).clamp(min=1e-12)
    total = b.cum[..., -1].sum(dim=-1, keepdim=True)
    target = torch.where(p < 1.0, (1.0 - p) * total, 0.0)  # p tiny: keep the top token
    key = _boundary_key(b, target, probes)
    both = values(torch.cat([key - 1, key], dim=-1).clamp_(min=_NEG_INF_KEY))
    count, weight = _at_or_below(b, both)
    value, above = both[:, 1:], count[..., 1]
    tied = above - count[..., 0]
    n_tied = tied.sum(dim=-1, keepdim=True).to(torch.float64)
    one = torch.exp(value - b.m).to(torch.float64).clamp_(min=1e-300)
    # tied tokens go from the highest id down while the weight at or below them stays
    # <= target (vLLM's ascending cumulative sum, ties in reverse id order); one stays
    dropped = torch.floor((target - weight[..., 0].sum(dim=-1, keepdim=True)) / one)
    keep_ties = (n_tied - dropped).clamp_(min=1.0).minimum(n_tied).to(torch.int64)
    start = above - (keep_ties - (tied.cumsum(dim=-1) - tied)).clamp(min=0).minimum(tied)
    kept = b.cum[..., -1] - b.cum.gather(-1, start.unsqueeze(-1)).squeeze(-1)
    return Nucleus(value, start, kept, keep_ties)


def draw(b: Blocks, nu: Nucleus, u: torch.Tensor) -> torch.Tensor:
    """Inverse CDF over the kept tokens with the rows' uniforms ``u`` (``float64 [batch, 1]``):
    a block by its kept weight, then a kept sorted position inside it, then the token of that
    value at that rank in id order. A row with no weight gives 0.

    Returns:
        ``int64 [batch]`` token ids (padding past the vocabulary is never drawn).
    """
    rows, _, block = b.s.shape
    g, rest = pick(nu.kept, u * nu.kept.sum(dim=-1, keepdim=True))
    s = b.s.gather(1, g.unsqueeze(-1).expand(rows, 1, block)).squeeze(1)
    cum = b.cum.gather(1, g.unsqueeze(-1).expand(rows, 1, block + 1)).squeeze(1)
    start = nu.start.gather(1, g)
    goal = cum.gather(1, start) + rest
    pos = (torch.searchsorted(cum, goal, right=True) - 1).maximum(start).clamp_(max=block - 1)
    value = s.gather(1, pos)
    # the kept ties are the first ranks of their value; any other value is kept whole
    first = torch.where(value == nu.value, start, torch.searchsorted(s, value))
    x = b.x.gather(1, g.unsqueeze(-1).expand(rows, 1, block)).squeeze(1)
    same = x.float() == value
    hit = same & (same.cumsum(dim=-1) == pos - first + 1)
    token = g.squeeze(-1) * block + hit.to(torch.uint8).argmax(dim=-1)
    return token.masked_fill_(nu.kept.sum(dim=-1) <= 0, 0)


def top_p(
    logits: torch.Tensor,
    p: torch.Tensor,
    u: torch.Tensor,
    *,
    block: int = BLOCK,
    probes: int | None = None,
) -> torch.Tensor:
    """Sample after top-p over the whole vocabulary, from sorted blocks.

    Args:
        logits: ``[batch, vocab]`` in any float dtype, NaN and infinities allowed.
        p: ``[batch]`` top-p per row (``>= 1``: none).
        u: ``float64 [batch, 1]`` uniforms.
        block: Tokens per sorted block.
        probes: Thresholds per search round (by default chosen by the batch size).

    Returns:
        ``int64 [batch]`` token ids, every one in ``[0, vocab)``.
    """
    if probes is None:
        probes = PROBES_SMALL_BATCH if logits.shape[0] < SMALL_BATCH else PROBES
    b = sorted_blocks(logits, block)
    return draw(b, nucleus(b, p, probes), u).clamp_(max=logits.shape[-1] - 1)


def kept_mask(
    logits: torch.Tensor, p: torch.Tensor, *, block: int = BLOCK, probes: int = PROBES
) -> torch.Tensor:
    """The ``bool [batch, vocab]`` nucleus :func:`top_p` draws from (for checks)."""
    b = sorted_blocks(logits, block)
    nu = nucleus(b, p, probes)
    x = b.x.flatten(1)[:, : logits.shape[-1]].float()
    tied = x == nu.value
    rank = tied.cumsum(dim=-1)
    return (x > nu.value) | (tied & (rank <= nu.keep_ties))
