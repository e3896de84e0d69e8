"""What the launch sequence and a captured graph read of their sampler: the seam between the
:class:`~kernelpolicy.kernels.sampling_triton.sampler.Sampler`, which decides how each call runs
and keeps what it builds, and the modules that carry a call out (``launch``: the kernels of one
call; ``choose``: which way it runs; ``replay``: a captured call shape). They depend on these
protocols, never on the Sampler, which provides them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import torch

if TYPE_CHECKING:
    from kernelpolicy.kernels.sampling_triton.draws import Draws
    from kernelpolicy.kernels.sampling_triton.failures import Failures
    from kernelpolicy.kernels.sampling_triton.graphs import GraphCache
    from kernelpolicy.kernels.sampling_triton.jit import Kernels
    from kernelpolicy.kernels.sampling_triton.tuning import Tuning

Capture = Callable[
    [Callable[[torch.Tensor], None], torch.Tensor, torch.device], Callable[..., None]
]
"""Captures a launch into a graph and returns its replay (a fake stands in on CPU tests)."""


class Launcher(Protocol):
    """What a call's launches read: the tuning (tiles, warps), the kernels, and the failure
    records (a dtype whose wide or rejection kernels failed skips them)."""

    @property
    def tuning(self) -> Tuning: ...

    @property
    def kernels(self) -> Kernels: ...

    @property
    def failures(self) -> Failures: ...


class GraphHost(Launcher, Protocol):
    """What choosing a graph and capturing or replaying one read besides: the graph cache (its
    sightings and failures), the uniforms' draws and the capture."""

    @property
    def graphs(self) -> GraphCache[Any]: ...

    @property
    def draws(self) -> Draws: ...

    @property
    def capture(self) -> Capture: ...
