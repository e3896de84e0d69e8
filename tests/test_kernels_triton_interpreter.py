"""The interpreter speed-ups that tests/conftest.py installs for the kernel tests: a launch
scans ``triton.language`` to patch it once, not again at every ``@triton.jit`` helper call
inside it (tests.helpers.patch_lang_once_per_launch), and xor reductions, which ``tl.sort``
runs at every stage, are one NumPy call instead of a Python loop per element
(tests.helpers.reduce_xor_with_numpy), and reductions with a combine function of their own fold
one slice at a time (tests.helpers.reduce_by_slices); kernels compute what they computed
before."""

from __future__ import annotations

import functools
import operator
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
# the interpreter's own, kept when this module is collected: tests/conftest.py replaces it for
# the session (tests.helpers.reduce_by_slices)
ORIGINAL_GENERIC_REDUCE = interpreter.ReduceOps.generic_reduce


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


@triton.jit
def _xor_kernel(src, dst, ROWS: tl.constexpr, COLS: tl.constexpr, PER_ROW: tl.constexpr):
    rows = tl.arange(0, ROWS)
    x = tl.load(src + rows[:, None] * COLS + tl.arange(0, COLS)[None, :])
    if PER_ROW:
        tl.store(dst + rows, tl.xor_sum(x, 1))
        tl.store(dst + ROWS + rows, tl.reshape(tl.xor_sum(x, 1, keep_dims=True), [ROWS]))
    else:
        tl.store(dst + rows, tl.zeros([ROWS], tl.int32) + tl.xor_sum(x))


@pytest.mark.parametrize(
    "per_row", [pytest.param(True, id="per-row"), pytest.param(False, id="all")]
)
def test_xor_reductions_skip_the_python_loop_with_the_same_result(
    monkeypatch: pytest.MonkeyPatch, per_row: bool
) -> None:
    """tl.xor_sum per row (with and without keep_dims) and over the whole block: the xor of
    the elements, without the interpreter's element-by-element generic_reduce."""
    loops: list[object] = []
    real = interpreter.ReduceOps.generic_reduce

    def counted(self: object, input: object) -> object:
        loops.append(input)
        return real(self, input)

    monkeypatch.setattr(interpreter.ReduceOps, "generic_reduce", counted)
    gen = torch.Generator().manual_seed(5)
    src = torch.randint(-(2**31), 2**31 - 1, (8, 16), dtype=torch.int32, generator=gen)
    dst = torch.zeros(16, dtype=torch.int32)
    _xor_kernel[(1,)](src, dst, ROWS=8, COLS=16, PER_ROW=per_row)
    if per_row:
        expected = [functools.reduce(operator.xor, row) for row in src.tolist()] * 2
    else:
        expected = [functools.reduce(operator.xor, src.flatten().tolist())] * 8 + [0] * 8
    assert dst.tolist() == expected
    assert loops == []


@triton.jit
def _sort_kernel(src, dst, N: tl.constexpr):
    offsets = tl.arange(0, N)
    tl.store(dst + offsets, tl.sort(tl.load(src + offsets), 0, descending=True))


@pytest.mark.parametrize("dtype", [torch.int32, torch.float32], ids=str)
def test_sorts_match_torch(dtype: torch.dtype) -> None:
    """tl.sort (whose stages reduce with xor) orders values with ties and negatives as torch
    does."""
    gen = torch.Generator().manual_seed(6)
    src = torch.randint(-20, 20, (256,), generator=gen).to(dtype)
    dst = torch.zeros_like(src)
    _sort_kernel[(1,)](src, dst, N=256)
    assert torch.equal(dst, torch.sort(src, descending=True).values)


@triton.jit
def _first_wins(a, ia, b, ib):
    """(value, index) of the larger value, the earlier index among equals: an order-sensitive
    combine (folding in another order would pick other indices)."""
    take_b = (b > a) | ((b == a) & (ib < ia))
    return tl.where(take_b, b, a), tl.where(take_b, ib, ia)


@triton.jit
def _custom_reduce_kernel(
    src, dst, ROWS: tl.constexpr, COLS: tl.constexpr, AXIS: tl.constexpr, KEEP: tl.constexpr,
    OUT: tl.constexpr,
):  # fmt: skip
    rows = tl.arange(0, ROWS)
    cols = tl.arange(0, COLS)
    x = tl.load(src + rows[:, None] * COLS + cols[None, :])
    at = tl.zeros([ROWS, COLS], tl.int32) + (cols[None, :] if AXIS == 1 else rows[:, None])
    value, index = tl.reduce((x, at), AXIS, _first_wins, keep_dims=KEEP)
    tl.store(dst + tl.arange(0, OUT), tl.reshape(value, [OUT]))
    tl.store(dst + OUT + tl.arange(0, OUT), tl.reshape(index, [OUT]).to(tl.float32))


@triton.jit
def _custom_reduce_1d_kernel(src, dst, N: tl.constexpr, KEEP: tl.constexpr):
    offsets = tl.arange(0, N)
    value, index = tl.reduce((tl.load(src + offsets), offsets), 0, _first_wins, keep_dims=KEEP)
    tl.store(dst + tl.arange(0, 1), tl.zeros([1], tl.float32) + value)
    tl.store(dst + 1 + tl.arange(0, 1), tl.zeros([1], tl.float32) + index.to(tl.float32))


@pytest.mark.parametrize("keep", [False, True], ids=["scalar", "keep-dims"])
def test_a_one_dimensional_custom_reduction_folds_to_a_scalar(
    monkeypatch: pytest.MonkeyPatch, keep: bool
) -> None:
    """A 1-D tl.reduce folds 0-d slices: the same value and first index as the interpreter's
    own element loop."""
    src = torch.tensor([1.0, 3.0, -2.0, 3.0, 0.0, 3.0, -1.0, 2.0])

    def run() -> list[float]:
        dst = torch.zeros(2)
        _custom_reduce_1d_kernel[(1,)](src, dst, N=8, KEEP=keep)
        return dst.tolist()

    fast = run()
    monkeypatch.setattr(interpreter.ReduceOps, "generic_reduce", ORIGINAL_GENERIC_REDUCE)
    assert fast == run() == [3.0, 1.0]


@pytest.mark.parametrize(
    ("axis", "keep"),
    [
        pytest.param(1, False, id="rows"),
        pytest.param(0, False, id="columns"),
        pytest.param(1, True, id="rows-keep-dims"),
    ],
)
def test_custom_reductions_fold_slices_with_the_same_result(
    monkeypatch: pytest.MonkeyPatch, axis: int, keep: bool
) -> None:
    """A tl.reduce with a combine function of its own gives exactly what the interpreter's
    element-by-element generic_reduce gives (ties included), in as many combine calls as the
    axis is long instead of one per element."""
    gen = torch.Generator().manual_seed(7)
    src = torch.randint(-3, 3, (8, 16), generator=gen).float()  # many ties
    n = 8 if axis == 1 else 16

    def run() -> torch.Tensor:
        dst = torch.zeros(2 * n)
        _custom_reduce_kernel[(1,)](src, dst, ROWS=8, COLS=16, AXIS=axis, KEEP=keep, OUT=n)
        return dst

    calls: list[int] = []
    real_combine = _first_wins.fn

    def counted(*args: object) -> object:
        calls.append(1)
        return real_combine(*args)

    monkeypatch.setattr(_first_wins, "fn", counted)
    fast = run()
    assert len(calls) == src.shape[axis] - 1
    fast_path = interpreter.ReduceOps.generic_reduce
    monkeypatch.setattr(interpreter.ReduceOps, "generic_reduce", ORIGINAL_GENERIC_REDUCE)
    slow = run()
    monkeypatch.setattr(interpreter.ReduceOps, "generic_reduce", fast_path)
    assert torch.equal(fast, slow)
    values, index = src.max(dim=axis)  # torch: the first index of the largest value
    assert torch.equal(fast[:n], values)
    assert torch.equal(fast[n:], index.float())
