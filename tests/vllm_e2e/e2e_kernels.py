"""The end-to-end test's own implementations, imported inside vLLM's worker by kernelpolicy's
plugin (this directory is on the server's PYTHONPATH): each counts its calls in a file under
``KERNELPOLICY_E2E_COUNTS`` and computes with kernelpolicy's torch kernels."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kernelpolicy.kernels import torch_impl


def _count(name: str, rows: int) -> None:
    directory = os.environ.get("KERNELPOLICY_E2E_COUNTS")
    if directory:
        with open(Path(directory) / f"{name}.{os.getpid()}", "a") as out:
            out.write(f"{rows}\n")


def top_k_top_p(logits: Any, k: Any, p: Any, generators: Any = None, **kwargs: Any) -> Any:
    """A sampler of the test's own: kernelpolicy's torch sampler, counted."""
    _count("sampler_mine", int(logits.shape[0]))
    return torch_impl.top_k_top_p(logits, k, p, generators, **kwargs)


def rmsnorm(x: Any, weight: Any, eps: float, residual: Any = None) -> Any:
    _count("rmsnorm_mine", int(x.shape[0]))
    return torch_impl.rmsnorm(x, weight, eps, residual)
