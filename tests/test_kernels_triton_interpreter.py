"""The interpreter speed-up that tests/conftest.py installs for the kernel tests
(tests.helpers.patch_lang_once_per_launch): a launch scans ``triton.language`` to patch it
once, not again at every ``@triton.jit`` helper call inside it; the kernel computes what it
computed before, and the language is left as it was."""

from __future__ import annotations

import os

import pytest
import torch

if torch.cuda.is_available():
    pytest.skip("the kernels run compiled on this GPU, not interpreted", allow_module_level=True)
os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are defined
pytest.importorskip("triton")

import triton
import triton.language as tl
from triton.runtime import interpreter

N = 8


@triton.jit
def _plus_one(x):
    return x + 1.0


@triton.jit
def _add_kernel(src, dst, CALLS: tl.constexpr, N: tl.constexpr):
    offsets = tl.arange(0, N)
    x = tl.load(src + offsets)
    for _ in tl.static_range(CALLS):
        x = _plus_one(x)
    tl.store(dst + offsets, x)


def _scans(monkeypatch: pytest.MonkeyPatch, calls: int) -> int:
    """How often one launch with ``calls`` helper calls scans a module to patch it."""
    scans: list[object] = []
    real = interpreter._patch_builtin

    def counted(*args: object) -> object:
        scans.append(args[0])
        return real(*args)

    monkeypatch.setattr(interpreter, "_patch_builtin", counted)
    src = torch.arange(N, dtype=torch.float32)
    dst = torch.zeros(N)
    _add_kernel[(1,)](src, dst, CALLS=calls, N=N)
    assert dst.tolist() == (src + calls).tolist()
    return len(scans)


@pytest.mark.parametrize(
    "calls", [pytest.param(10, id="10-calls"), pytest.param(40, id="40-calls")]
)
def test_helper_calls_do_not_scan_the_language_again(
    monkeypatch: pytest.MonkeyPatch, calls: int
) -> None:
    """A launch with many helper calls scans as often as one with a single call (without the
    speed-up, every call scans the language's modules again)."""
    assert 0 < _scans(monkeypatch, calls) == _scans(monkeypatch, 1)


def test_the_language_is_restored_after_a_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launch's patch is undone when it ends, as without the speed-up: ``tl.where`` is
    Triton's builtin again, not the interpreter's stand-in."""
    _scans(monkeypatch, 3)
    assert tl.core.is_builtin(tl.where)
