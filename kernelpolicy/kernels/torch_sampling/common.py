"""What every path of the torch sampler shares: preparing the logits, softmax weights, the
per-row uniforms and the inverse-CDF draw."""

from __future__ import annotations

from collections.abc import Mapping

import torch

Generators = Mapping[int, torch.Generator] | None


def finite_or_zero(m: torch.Tensor) -> torch.Tensor:
    return torch.where(torch.isfinite(m), m, torch.zeros_like(m))


def weights(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unnormalised softmax weights of NaN-free float32 logits, and each row's maximum.

    A row with ``+inf`` logits gives them weight 1 and the rest 0; a row with nothing finite
    gives all zeros (its caller answers token 0).
    """
    m = x.amax(dim=-1, keepdim=True)
    e = torch.exp(x - finite_or_zero(m))
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


def pick(mass: torch.Tensor, goal: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse CDF over ``float64 [batch, n]`` masses at ``goal`` (``[batch, 1]``): the chosen
    column and how far ``goal`` lies into it. Rounding never picks a column of zero mass past
    the last non-empty one (a row of zeros gives column 0).

    Returns:
        ``(column, rest)``, both ``[batch, 1]`` (int64 and float64).
    """
    cdf = torch.cumsum(mass, dim=-1)
    column = torch.searchsorted(cdf, goal, right=True)
    last = (mass > 0).cumsum(dim=-1).argmax(dim=-1, keepdim=True)  # the last non-empty one
    column = torch.minimum(column, last)
    before = cdf.gather(1, column) - mass.gather(1, column)
    return column, (goal - before).clamp(min=0.0)


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
