"""The sampler's ``@triton.jit`` kernels as one value, so that a
:class:`~kernelpolicy.kernels.sampling_triton.sampler.Sampler` launches the ones it was given:
a test or the compile check puts a spy or a recorder in place of one (``kernel[grid](...)``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from kernelpolicy.kernels.sampling_triton.bounds import bounds_kernel
from kernelpolicy.kernels.sampling_triton.common import group_kernel
from kernelpolicy.kernels.sampling_triton.fast import finish_kernel, select_kernel
from kernelpolicy.kernels.sampling_triton.reject import (
    propose_kernel,
    reject_pick_kernel,
    reject_tile_kernel,
)
from kernelpolicy.kernels.sampling_triton.row import row_kernel
from kernelpolicy.kernels.sampling_triton.wide import (
    wide_compact_kernel,
    wide_draw_kernel,
    wide_narrow_kernel,
    wide_resolve_kernel,
    wide_tile_kernel,
)


@dataclasses.dataclass(frozen=True)
class Kernels:
    """Each kernel the sampler launches, by its name (``launch.py`` says when)."""

    group_kernel: Any = group_kernel
    bounds_kernel: Any = bounds_kernel
    select_kernel: Any = select_kernel
    finish_kernel: Any = finish_kernel
    row_kernel: Any = row_kernel
    propose_kernel: Any = propose_kernel
    reject_tile_kernel: Any = reject_tile_kernel
    reject_pick_kernel: Any = reject_pick_kernel
    wide_tile_kernel: Any = wide_tile_kernel
    wide_narrow_kernel: Any = wide_narrow_kernel
    wide_compact_kernel: Any = wide_compact_kernel
    wide_resolve_kernel: Any = wide_resolve_kernel
    wide_draw_kernel: Any = wide_draw_kernel

    def replace(self, **kernels: Any) -> Kernels:
        """A copy with some kernels replaced (by name)."""
        return dataclasses.replace(self, **kernels)


def names() -> list[str]:
    """Every kernel's name, in launch order of a full call."""
    return [field.name for field in dataclasses.fields(Kernels)]
