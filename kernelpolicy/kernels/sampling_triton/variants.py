"""What a call of the sampler needs compiled (its :class:`Variant`), the host's reading of a
call (:func:`prepare`), and the variants a model's calls can need (:func:`of`); the sampler
builds them (``sampler.build_variant``).

Triton compiles a kernel per set of ``constexpr`` values and argument dtypes, so the sampler's
variants are: the logits' dtype and device, k's dtype, which of top-k / top-p / top-p-without-k
rows a call has (they choose the kernels and their flags), the vocabulary (it sizes the tile
counts the kernels take as constants) and the group size (chosen from the vocabulary and the
largest k). The batch size is not one: it only sizes the grids.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING

import torch

from kernelpolicy.dtypes import dtype_name

if TYPE_CHECKING:
    from kernelpolicy.kernels.sampling_triton.tuning import Tuning

Rows = tuple[bool, bool, bool]
"""Some row has k, some row has p, some row may have p without k."""


@dataclasses.dataclass(frozen=True)
class Variant:
    """One compiled form of the sampler's kernels (see the module doc)."""

    device: str
    dtype: torch.dtype
    k_dtype: torch.dtype | None
    rows: Rows
    vocab: int
    size: int

    def describe(self) -> str:
        """In words: ``bfloat16 top-k top-p, vocab 128256 (groups of 32) on cuda:0``."""
        has_k, has_p, p_rows = self.rows
        paths = [name for name, on in (("top-k", has_k), ("top-p", has_p)) if on] or ["plain"]
        paths += ["wide rows"] if p_rows else []
        dtype = dtype_name(self.dtype)
        where = f"vocab {self.vocab} (groups of {self.size}) on {self.device}"
        return f"{dtype} {' '.join(paths)}, {where}"


@dataclasses.dataclass(frozen=True)
class Call:
    """The host's reading of one call: what the kernels get, and the variant they need (None:
    the call goes to the torch implementation, with ``k`` as given)."""

    logits: torch.Tensor
    k: torch.Tensor | None
    p: torch.Tensor | None
    size: int
    rows: Rows
    variant: Variant | None

    @property
    def k_dtype(self) -> torch.dtype | None:
        return None if self.k is None else self.k.dtype


def prepare(
    tuning: Tuning,
    logits: torch.Tensor,
    k: torch.Tensor | None,
    p: torch.Tensor | None,
    k_max: int | None,
) -> Call:
    """Check the call's shapes and read what the host must know (see ``Sampler.__call__``),
    for a sampler of this ``tuning``.

    Raises:
        ValueError: logits not ``[batch, vocab]``, or k or p of another shape than one value
            a row or one for all.
    """
    if logits.dim() != 2:
        raise ValueError(f"logits must be [batch, vocab], got shape {tuple(logits.shape)}")
    batch, vocab = logits.shape
    k, p = per_row(k, "k", batch), per_row(p, "p", batch)
    k_bound, every_row_k = (0, False) if k is None else k_bound_of(k, vocab, k_max)
    if k_bound > tuning.max_k:
        return Call(logits, k, p, 0, (True, p is not None, False), None)
    k_rows = k if k_bound > 0 else None
    # a row with p and no k may need the wide kernels
    rows = (k_rows is not None, p is not None, p is not None and not every_row_k)
    size = group_size(tuning, vocab, k_bound)
    k_dtype = None if k_rows is None else k_rows.dtype
    variant = Variant(str(logits.device), logits.dtype, k_dtype, rows, vocab, size)
    return Call(logits, k_rows, p, size, rows, variant)


def per_row(t: torch.Tensor | None, name: str, batch: int) -> torch.Tensor | None:
    """``t`` with one value a row: one value for all is broadcast (as the torch implementation
    does); the kernels read ``t[row]``, so any other shape is refused, not read past its end."""
    if t is None or tuple(t.shape) == (batch,):
        return t
    if t.numel() == 1:
        return t.reshape(1).expand(batch)
    raise ValueError(
        f"{name} must hold one value per row ([{batch}]) or one for all, got shape {tuple(t.shape)}"
    )


def group_size(tuning: Tuning, vocab: int, k_bound: int) -> int:
    """The largest power of two <= ``tuning.group`` that leaves at least k_bound groups and
    room for the (k_bound - 1 + slack) * size + k_bound candidates of a top-k row (bounds.py)."""
    size = tuning.group
    while size > 1 and (
        -(-vocab // size) < k_bound or (k_bound - 1 + tuning.slack) * size + k_bound > tuning.cap
    ):
        size //= 2
    return size


def k_bound_of(k: torch.Tensor, vocab: int, k_max: int | None) -> tuple[int, bool]:
    """An upper bound of the rows' top-k (0: no row has one), and whether every row has one.

    A row's ``k`` outside ``(0, vocab)`` means "no top-k"; the kernels read it so themselves,
    so ``k`` goes to them as the caller passed it. On the host this costs one reduction; on the
    GPU without ``k_max`` it reads ``k`` with a device synchronisation.
    """
    if k.device.type != "cpu" and k_max is not None:
        return max(min(int(k_max), vocab - 1), 0), False
    if not k.numel():
        return 0, False
    low, high = (int(v) for v in torch.aminmax(k))
    every_row = low > 0 and high < vocab
    if high >= vocab:  # vLLM passes k = vocab for the rows without top-k
        high = int(torch.where(k < vocab, k, 0).max())
    return max(high, 0), every_row


K_DTYPES = (torch.int32, torch.int64)
"""The dtypes of k the engines pass: vLLM keeps ``top_k`` as int32 (its ``InputBatch``), a
caller building k with ``torch.full`` or ``torch.tensor`` of ints gets int64."""


def group_sizes(tuning: Tuning, vocab: int) -> list[int]:
    """Every group size a top-k call of this vocabulary can pick (k from 1 to ``max_k``, below
    the vocabulary): with the default tuning groups of 32, 16 (from k 110) and 8 (from k 227)
    for a vocabulary of 8192 tokens or more."""
    bounds = range(1, min(tuning.max_k, vocab - 1) + 1)
    return list(dict.fromkeys(group_size(tuning, vocab, bound) for bound in bounds))


def of(
    tuning: Tuning,
    dtypes: Iterable[torch.dtype],
    vocabs: Iterable[int],
    *,
    device: str = "cuda:0",
    k_dtypes: Iterable[torch.dtype] = K_DTYPES,
) -> list[Variant]:
    """The variants a model's calls can need: each dtype and vocabulary, every path (top-k,
    top-p, both, plain; p with and without every row having k), with k in each of ``k_dtypes``
    and each group size a k up to ``tuning.max_k`` picks (:func:`group_sizes`), for a sampler
    of this ``tuning``. For ``Sampler.warm``: with the default tuning 3 top-k paths x 2 k dtypes
    x 3 group sizes + 2 paths without k = 20 per (dtype, vocabulary) from 8192 tokens (at most
    38: a tiny vocabulary reaches every power of two up to ``tuning.group``)."""
    found: dict[Variant, None] = {}
    k_paths = [(True, False, False), (True, True, False), (True, True, True)]
    other_paths = [(False, True, True), (False, False, False)]
    kinds = list(k_dtypes)
    for dtype in dtypes:
        for vocab in vocabs:
            for rows in k_paths:
                for size in group_sizes(tuning, vocab):
                    for kd in kinds:
                        found[Variant(device, dtype, kd, rows, vocab, size)] = None
            for rows in other_paths:
                size = group_size(tuning, vocab, 0)
                found[Variant(device, dtype, None, rows, vocab, size)] = None
    return list(found)
