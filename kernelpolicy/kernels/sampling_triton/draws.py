"""Where a sampler's uniforms come from: one a row for the draw, the wide rows' proposals, and
a graph's uniforms filled before its replay (:class:`Draws`; tests put even grids in)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from kernelpolicy.kernels.torch_impl import Generators


def uniform(batch: int, device: torch.device, generators: Generators) -> torch.Tensor:
    """One uniform a row (seeded rows from their own generator)."""
    u = torch.rand(batch, device=device)
    for row, generator in (generators or {}).items():
        u[row : row + 1].uniform_(generator=generator)
    return u


def proposal_uniforms(
    batch: int, proposals: int, device: torch.device, generators: Generators
) -> torch.Tensor:
    """``[batch, proposals]`` uniforms for the wide rows' proposals (seeded rows from their own
    generator, after their main uniform)."""
    q = torch.rand(batch, proposals, device=device)
    for row, generator in (generators or {}).items():
        q[row].uniform_(generator=generator)
    return q


def graph_uniforms(uq: torch.Tensor) -> None:
    """Fill a graph's uniforms (each row's draw, then the wide rows' proposals) in one launch,
    before its replay: a graph that holds torch's random-number kernels makes each replay
    launch two more kernels to advance the generator's seed and offset."""
    uq.uniform_()


@dataclasses.dataclass(frozen=True)
class Draws:
    """Where a sampler's uniforms come from (tests put even grids in: a quadrature)."""

    uniform: Callable[[int, torch.device, Generators], torch.Tensor] = uniform
    proposals: Callable[[int, int, torch.device, Generators], torch.Tensor] = proposal_uniforms
    graph: Callable[[torch.Tensor], None] = graph_uniforms
