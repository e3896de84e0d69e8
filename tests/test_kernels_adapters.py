"""The FlashInfer adapter (kernelpolicy/kernels/adapters.py) as FlashInfer sees it. FlashInfer
cannot run here, so a stand-in ``flashinfer.sampling`` package, written to a temporary folder on
``sys.path``, records what reaches it. What a CPU can show: which kernel is called, the values,
dtypes and device of k and p it is given, and that the adapter asks torch for a non-blocking
copy of each (recorded by a torch function mode). That the host then does not wait for the
GPU, and the pinned staging of ``kernels/transfer.py``, need CUDA: the GPU visit checks them."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from torch.overrides import TorchFunctionMode

from kernelpolicy.kernels import adapters

VOCAB = 50
FAKE_SAMPLING = '''
"""Stands in for flashinfer.sampling: records each call, returns int32 ids like the real one."""
import torch

CALLS = []


def _record(name, first, k, p, deterministic):
    CALLS.append({"name": name, "first": first, "k": k, "p": p, "deterministic": deterministic})
    return first.argmax(dim=-1).to(torch.int32)


def top_p_sampling_from_probs(probs, top_p, *, deterministic=False):
    return _record("top_p_from_probs", probs, None, top_p, deterministic)


def top_k_sampling_from_probs(probs, top_k, *, deterministic=False):
    return _record("top_k_from_probs", probs, top_k, None, deterministic)


def top_k_top_p_sampling_from_logits(logits, top_k, top_p, *, deterministic=False):
    return _record("top_k_top_p_from_logits", logits, top_k, top_p, deterministic)
'''


class RecordCopies(TorchFunctionMode):
    """Every ``Tensor.to`` that names a device, with its keyword arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.copies: list[dict[str, Any]] = []

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        named = "device" in kwargs or any(isinstance(a, torch.device) for a in args[1:])
        if func is torch.Tensor.to and named:
            self.copies.append({"shape": tuple(args[0].shape), **kwargs})
        return func(*args, **kwargs)


@pytest.fixture
def flashinfer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    package = tmp_path / "flashinfer"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "sampling.py").write_text(textwrap.dedent(FAKE_SAMPLING))
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("flashinfer", "flashinfer.sampling"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    adapters.prepare_flashinfer()  # imports it as the Resolution does
    yield sys.modules["flashinfer.sampling"]
    for name in ("flashinfer.sampling", "flashinfer"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize(
    ("k", "p", "kernel", "k_seen", "p_seen"),
    [
        pytest.param(
            torch.tensor([5, 0, VOCAB, VOCAB + 7]), None, "top_k_from_probs",
            [5, VOCAB, VOCAB, VOCAB], None, id="k-int64-rows-without-k-ask-for-all",
        ),
        pytest.param(
            torch.tensor([1, 49, -3, 2], dtype=torch.int32), None, "top_k_from_probs",
            [1, 49, VOCAB, 2], None, id="k-int32",
        ),
        pytest.param(
            None, torch.tensor([0.9, 1.0, 0.5, 0.25], dtype=torch.float64), "top_p_from_probs",
            None, [0.9, 1.0, 0.5, 0.25], id="p-float64",
        ),
        pytest.param(
            torch.tensor([3, 0, 3, 3]), torch.tensor([0.5, 0.5, 1.0, 0.75]),
            "top_k_top_p_from_logits", [3, VOCAB, 3, 3], [0.5, 0.5, 1.0, 0.75], id="k-and-p",
        ),
    ],
)  # fmt: skip
def test_flashinfer_gets_int32_k_and_float32_p_on_the_logits_device(
    flashinfer: ModuleType,
    k: torch.Tensor | None,
    p: torch.Tensor | None,
    kernel: str,
    k_seen: list[int] | None,
    p_seen: list[float] | None,
) -> None:
    """One kernel call per sampler call, with k int32 (a row without top-k asks for the whole
    vocabulary), p float32, both on the logits' device, deterministic; the ids come back int64;
    the caller's k and p are untouched; each copy to the device is asked non-blocking."""
    logits = torch.randn(4, VOCAB, generator=torch.Generator().manual_seed(0))
    given = (None if k is None else k.clone(), None if p is None else p.clone())
    recorder = RecordCopies()
    with recorder:
        ids = adapters.flashinfer_top_k_top_p(logits, k, p)
    (call,) = flashinfer.CALLS
    assert call["name"] == kernel
    assert call["deterministic"] is True
    for seen, expected, dtype in (
        (call["k"], k_seen, torch.int32),
        (call["p"], p_seen, torch.float32),
    ):
        if expected is None:
            assert seen is None
            continue
        assert (seen.dtype, seen.device) == (dtype, logits.device)
        assert seen.tolist() == pytest.approx(expected)
    if kernel == "top_k_top_p_from_logits":
        assert call["first"] is logits  # FlashInfer reads the logits themselves
    else:
        assert call["first"].dtype == torch.float32
        assert torch.allclose(call["first"], logits.softmax(dim=-1))
    assert ids.dtype == torch.int64
    assert ids.tolist() == call["first"].argmax(dim=-1).tolist()
    for before, after in zip(given, (k, p), strict=True):
        assert (before is None) == (after is None)
        assert before is None or torch.equal(before, after)
    copies = [c for c in recorder.copies if c.get("device") == logits.device]
    assert len(copies) == (k is not None) + (p is not None)
    assert all(c.get("non_blocking") is True for c in copies), copies


@pytest.mark.parametrize(
    ("k", "p", "generators"),
    [
        pytest.param(None, None, None, id="neither-k-nor-p"),
        pytest.param(torch.full((4,), 5), None, {1: torch.Generator().manual_seed(3)}, id="seeded"),
    ],
)
def test_seeded_and_unfiltered_calls_never_reach_flashinfer(
    flashinfer: ModuleType, k: torch.Tensor | None, p: torch.Tensor | None, generators: Any
) -> None:
    """As the policies route them, to the torch implementation."""
    logits = torch.randn(4, VOCAB)
    ids = adapters.flashinfer_top_k_top_p(logits, k, p, generators)
    assert ids.shape == (4,)
    assert flashinfer.CALLS == []
