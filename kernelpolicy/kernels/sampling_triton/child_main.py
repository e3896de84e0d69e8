"""The child process of a background build (``python -m
kernelpolicy.kernels.sampling_triton.child_main TASK``, started by :mod:`.child`): build one
variant with the sampler of its tuning, recording it in the kernel cache where one is in use,
as ``kernelpolicy warm``'s children do. Apart from :mod:`.child`, which the sampler imports to
start it, so that the two do not import each other."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["build", "main"]

from kernelpolicy.kernels.sampling_triton.child import variant_of
from kernelpolicy.kernels.sampling_triton.sampler import Sampler
from kernelpolicy.kernels.sampling_triton.tuning import Tuning


def build(task: dict[str, Any], make: Callable[[Tuning], Sampler] | None = None) -> str | None:
    """Build the task's variant now, with a sampler of its tuning (``make``: the package's
    ``Sampler``); why it failed, or None."""
    tuning, variant = variant_of(task)
    failed = (make or Sampler)(tuning).warm([variant])
    return "; ".join(failed.values())[:500] if failed else None


def main(argv: list[str]) -> int:
    """The child: build one variant (``argv[1]``: :func:`task_of`'s JSON); prints why and
    returns 1 when it fails."""
    failed = build(json.loads(argv[1]))
    if failed is not None:
        print(failed)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
