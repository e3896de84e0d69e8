"""What the Triton sampler's tests share (tests/test_kernels_triton.py and
tests/test_kernels_triton_inputs.py): the device they run on, a sampler of each test's own, and
one value per row."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import TritonSampler

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def sample() -> TritonSampler:
    """A sampler of its own for the test: the same kernels with small tiles and buffers on CPU
    (they are constexprs chosen by the host), so that the interpreter's sorts stay cheap;
    vocabularies here are small to match."""
    return TritonSampler(small=DEVICE == "cpu")


def full(value: float | None, batch: int) -> torch.Tensor | None:
    return None if value is None else torch.full((batch,), value)
