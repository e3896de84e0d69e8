"""The variants ``kernelpolicy warm`` builds (``variants.of`` through ``kernels/warm_child.py``)
include the variant of every call an inference engine makes: k in int32 (vLLM keeps ``top_k``
as int32) or int64, and any k up to ``Tuning.max_k`` (a larger k picks a smaller group size)."""

from __future__ import annotations

import json
import os
import sys

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # as the kernel tests: before the kernels load
pytest.importorskip("triton")

from kernelpolicy.kernels import sampling_triton, warm_child
from kernelpolicy.kernels.sampling_triton import Tuning, Variant, variants


def _call_variant(
    dtype: torch.dtype, vocab: int, k: int | None, k_dtype: torch.dtype, p: float | None
) -> Variant:
    logits = torch.zeros(4, vocab, dtype=dtype)
    k_rows = None if k is None else torch.full((4,), k, dtype=k_dtype)
    p_rows = None if p is None else torch.full((4,), p)
    variant = variants.prepare(Tuning(), logits, k_rows, p_rows, None).variant
    assert variant is not None
    return variant


CALLS = [
    pytest.param(torch.float32, 151936, 50, torch.int32, None, id="vllm-int32-k50"),
    pytest.param(torch.bfloat16, 128256, 50, torch.int32, 0.9, id="vllm-int32-k50-p"),
    pytest.param(torch.float32, 128256, 128, torch.int64, None, id="int64-k128-groups-of-16"),
    pytest.param(torch.float32, 128256, 128, torch.int32, 0.9, id="int32-k128-p"),
    pytest.param(torch.float16, 32000, 200, torch.int32, None, id="int32-k200-groups-of-16"),
    pytest.param(torch.float32, 32000, 256, torch.int64, None, id="int64-k256-groups-of-8"),
    pytest.param(torch.float32, 32000, 1, torch.int32, None, id="int32-k1"),
    pytest.param(torch.float32, 32000, 50, torch.int64, None, id="int64-k50"),
    pytest.param(torch.float32, 32000, None, torch.int64, 0.9, id="top-p-only"),
    pytest.param(torch.float32, 32000, None, torch.int64, None, id="plain"),
]


@pytest.mark.parametrize(("dtype", "vocab", "k", "k_dtype", "p"), CALLS)
def test_warm_set_holds_the_calls_variant(
    dtype: torch.dtype, vocab: int, k: int | None, k_dtype: torch.dtype, p: float | None
) -> None:
    """The call's variant is among ``variants.of`` for its dtype and vocabulary."""
    wanted = variants.of(Tuning(), [dtype], [vocab], device="cpu")
    assert _call_variant(dtype, vocab, k, k_dtype, p) in wanted


@pytest.mark.parametrize(
    ("vocab", "count"),
    [
        # 3 top-k paths x 2 k dtypes x groups of 32, 16 and 8, and the two paths without k
        pytest.param(128256, 3 * 2 * 3 + 2, id="vocab-128256"),
        pytest.param(32000, 3 * 2 * 3 + 2, id="vocab-32000"),
        # a tiny vocabulary needs as many groups as k: every power of two from 32 to 1
        pytest.param(100, 3 * 2 * 6 + 2, id="vocab-100"),
    ],
)
def test_warm_set_is_bounded(vocab: int, count: int) -> None:
    """20 variants per (dtype, vocabulary) of a model's size with the default tuning; never
    more than 38 (group sizes are powers of two up to 32)."""
    assert len(variants.of(Tuning(), [torch.float32], [vocab], device="cpu")) == count


@pytest.mark.parametrize(
    ("k", "k_dtype"),
    [
        pytest.param(50, torch.int32, id="int32-k50"),
        pytest.param(128, torch.int32, id="int32-k128"),
        pytest.param(128, torch.int64, id="int64-k128"),
    ],
)
def test_warm_child_builds_the_calls_variant(
    monkeypatch: pytest.MonkeyPatch, k: int, k_dtype: torch.dtype
) -> None:
    """``kernelpolicy warm``'s build process asks the sampler for the call's variant."""
    built: list[Variant] = []

    def record(wanted: list[Variant]) -> dict[Variant, str]:
        built.extend(wanted)
        return {}

    monkeypatch.setattr(sampling_triton, "warm", record)
    task = {"impl": "triton", "dtype": "float32", "vocab": 151936, "device": "cpu"}
    monkeypatch.setattr(sys, "argv", ["warm_child", json.dumps(task)])
    assert warm_child.main() == 0
    assert _call_variant(torch.float32, 151936, k, k_dtype, None) in built
