"""What failed at run time while the Triton sampler kept serving, correctly but slower: one
record per way it degrades, each a dictionary dtype -> why that the sampler reads on its hot
path. A Resolution that loads the sampler reports every entry in ``runtime_fallbacks``, the
decision's warnings and ``explain`` (:mod:`kernelpolicy.kernels.degraded`).
"""

from __future__ import annotations

import torch

from kernelpolicy.kernels.degraded import Degradations, Degraded

DEGRADATIONS = Degradations()
"""The records below; a Resolution that loads the sampler listens to it."""

WIDE_FAILED: Degraded[torch.dtype] = DEGRADATIONS.record(
    "the wide-nucleus kernels failed to build for {key}",
    "wide top-p rows of {key} logits go to the exact per-row kernel",
)
"""dtypes whose wide kernels failed to build in this process (-> why): their wide rows go to
row_kernel, exact but slower, instead of failing the call."""

REJECT_FAILED: Degraded[torch.dtype] = DEGRADATIONS.record(
    "the proposal kernels failed to build for {key}",
    "wide top-p rows of {key} logits go straight to the exact wide kernels",
)
"""dtypes whose proposal kernels (reject.py) failed to build in this process (-> why): their
wide rows go straight to the exact wide kernels."""

UPCAST: Degraded[torch.dtype] = DEGRADATIONS.record(
    "the kernels failed to compile for {key}",
    "{key} logits are converted to float32 first, one more pass over them",
)
"""dtypes whose kernels failed to compile in this process (-> why): their logits are converted
to float32 before the kernels (one more pass over the logits), instead of failing the call."""

CAPTURE_FAILED: Degraded[torch.dtype] = DEGRADATIONS.record(
    "CUDA-graph capture failed for a {key} call shape",
    "a {key} call shape whose capture fails launches eagerly, with the host time of each launch",
)
"""dtypes with a call shape whose CUDA-graph capture failed (-> the first such shape and why);
``GRAPHS`` keeps every failed shape, which runs eagerly from then on."""
