"""The host-to-device copies of per-row parameters (kernelpolicy/kernels/transfer.py). The
pinned path itself needs CUDA (checked by the GPU visit's verify and benchmark); here: values,
dtypes and the fallback when memory cannot be pinned."""

from __future__ import annotations

import pytest
import torch

from kernelpolicy.kernels import transfer

CPU = torch.device("cpu")


@pytest.mark.parametrize(
    ("src", "dtype", "expected_dtype", "same_object"),
    [
        pytest.param(torch.tensor([50, 0, 7]), None, torch.int64, True, id="k-as-is"),
        pytest.param(torch.tensor([50, 0, 7]), torch.int32, torch.int32, False, id="k-to-int32"),
        pytest.param(
            torch.tensor([0.9, 1.0], dtype=torch.float64),
            torch.float32,
            torch.float32,
            False,
            id="p-float64-to-float32",
        ),
        pytest.param(torch.tensor([0.5]), torch.float32, torch.float32, True, id="p-as-is"),
    ],
)
def test_to_device_keeps_values_and_converts_dtype(
    src: torch.Tensor, dtype: torch.dtype | None, expected_dtype: torch.dtype, same_object: bool
) -> None:
    out = transfer.to_device(src, CPU, dtype)
    assert out.dtype == expected_dtype
    assert out.device == CPU
    assert torch.equal(out, src.to(expected_dtype))
    assert (out is src) is same_object


@pytest.mark.parametrize(
    ("dst", "src"),
    [
        pytest.param(torch.zeros(4, dtype=torch.int64), torch.tensor([1, 2, 3, 4]), id="int64"),
        pytest.param(torch.zeros(4, dtype=torch.int32), torch.tensor([9, 8, 7, 6]), id="int32"),
        pytest.param(
            torch.ones(3),
            torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64),
            id="float64-into-float32",
        ),
    ],
)
def test_copy_into_overwrites_the_buffer(dst: torch.Tensor, src: torch.Tensor) -> None:
    address = dst.data_ptr()
    transfer.copy_into(dst, src)
    assert dst.data_ptr() == address  # a graph reads this address: it must not move
    assert torch.equal(dst, src.to(dst.dtype))


def test_pinned_falls_back_to_the_tensor_itself_without_cuda() -> None:
    if torch.cuda.is_available():
        pytest.skip("pinning works on this machine; the fallback is for hosts without CUDA")
    t = torch.arange(5)
    assert transfer.pinned(t) is t
