"""A variant the sampler built serves any valid view of its logits without a compile of its own
(review C1: a padded-vocabulary view compiled every kernel inline, 31.5 s on an H200).

Triton compiles a kernel per specialisation of its arguments: an int on being 1 and on its
divisibility by 16, a pointer on its 16-byte alignment (``native_specialize_impl``, which runs on
CPU). Here every kernel is a spy that records the specialisation of each launch, as Triton's
binder computes it for the real kernel, and launches nothing: a call through a view must need
no (kernel, specialisation) that the variant's build did not."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # as the kernel tests: before the kernels load
pytest.importorskip("triton")

from triton._C.libtriton import native_specialize_impl
from triton.backends.compiler import BaseBackend
from triton.runtime.jit import JITFunction

from kernelpolicy.kernels.sampling_triton import Kernels, Sampler, jit

Launch = tuple[str, tuple[Any, ...]]


class _Spy:
    """Stands in for one kernel: ``kernel[grid](**kwargs)`` records the launch's specialisation."""

    def __init__(self, name: str, kernel: Any, seen: set[Launch]) -> None:
        unspecialised = getattr(kernel, "do_not_specialize", None)
        if unspecialised is None:  # Triton's interpreter keeps the decorator's arguments
            unspecialised = kernel.kwargs.get("do_not_specialize", [])
        self.name, self.seen = name, seen
        self.params = JITFunction(kernel.fn, do_not_specialize=unspecialised).params

    def __getitem__(self, grid: object) -> Any:
        def launch(**kwargs: Any) -> None:
            kwargs.pop("num_warps", None)
            spec = []
            for param in self.params:
                value = kwargs[param.name]
                if param.is_constexpr:
                    spec.append(("constexpr", value))
                else:
                    specialize = not param.do_not_specialize
                    align = not param.do_not_specialize_on_alignment
                    spec.append(
                        native_specialize_impl(BaseBackend, value, False, specialize, align)
                    )
            self.seen.add((self.name, tuple(spec)))

        return launch


def _spied_sampler(seen: set[Launch]) -> Sampler:
    real = Kernels()
    spies = {name: _Spy(name, getattr(real, name), seen) for name in jit.names()}
    return Sampler(kernels=real.replace(**spies), cache=lambda: None)


def _padded(batch: int, vocab: int, stride: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(batch, stride).to(dtype)[:, :vocab]


VIEWS = [
    pytest.param(lambda: torch.randn(8, 32001), id="contiguous-32001"),
    pytest.param(lambda: _padded(8, 32001, 32064, torch.float32), id="vllm-padded-32001"),
    pytest.param(lambda: _padded(4, 151646, 151936, torch.float32), id="vllm-padded-qwen"),
    pytest.param(lambda: _padded(4, 32001, 32064, torch.bfloat16), id="padded-bf16"),
    pytest.param(lambda: torch.randn(9, 32001)[1:], id="row-offset-unaligned-pointer"),
    pytest.param(lambda: torch.randn(9, 32000)[1:], id="row-offset-aligned-32000"),
    pytest.param(lambda: _padded(4, 32000, 32001, torch.float32), id="odd-stride-vocab-32000"),
    pytest.param(lambda: torch.randn(4, 32003)[:, 3:], id="column-offset-unaligned-pointer"),
    pytest.param(lambda: torch.randn(32001, 4).t(), id="transposed"),
    pytest.param(lambda: _padded(1, 32001, 32064, torch.float32), id="one-row-padded"),
]
PATHS = [
    pytest.param(50, None, torch.int64, id="top-k"),
    pytest.param(128, 0.9, torch.int32, id="int32-top-k-top-p"),
    pytest.param(None, 0.9, torch.int64, id="top-p-wide-kernels"),
    pytest.param(None, None, torch.int64, id="plain"),
]


@pytest.mark.parametrize(("k", "p", "k_dtype"), PATHS)
@pytest.mark.parametrize("make", VIEWS)
def test_a_view_needs_no_kernel_the_build_did_not_compile(
    make: Any, k: int | None, p: float | None, k_dtype: torch.dtype
) -> None:
    """Every launch of the call through the view has a specialisation the build launched."""
    logits = make()
    batch = logits.shape[0]
    k_rows = None if k is None else torch.full((batch,), k, dtype=k_dtype)
    p_rows = None if p is None else torch.full((batch,), p)
    built: set[Launch] = set()
    sampler = _spied_sampler(built)
    variant = sampler.variant(logits, k_rows, p_rows)
    assert variant is not None
    assert sampler.warm([variant]) == {}
    called: set[Launch] = set()
    sampler.kernels = _spied_sampler(called).kernels
    sampler.nonblocking(logits, k_rows, p_rows)
    assert called, "the call launched nothing"
    missing = sorted(name for name, _ in called - built)
    assert not missing, f"kernels the build did not compile: {missing}"
