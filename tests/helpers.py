"""Helpers shared by the engine tests: fixtures by name, resolution with the bundled pack."""

from __future__ import annotations

import inspect
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from kernelpolicy import Platform, load_platform
from kernelpolicy.engine import Resolution, resolve_policies
from kernelpolicy.policy import PolicySet, load_policies

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "kernelpolicy/fixtures/platforms"
GUARDED_GREEDY_POLICY = """schema = "kernelpolicy.policy/v1"
[features."sampler.greedy"]
description = "greedy with a guarded planted kernel (the aiter greedy bug)"
fallback = "torch"
[[features."sampler.greedy".candidates]]
impl = "planted"
entry = "kernelpolicy.testing.buggy_kernels:greedy_out_of_range"
halt_on = { guard_trips = 2 }
[[features."sampler.greedy".candidates.known_issues]]
reason = "returns vocab_size for all-NaN rows"
action = "guard"
guard = "clamp_token_ids"
[[features."sampler.greedy".candidates]]
impl = "torch"
"""
"""A policy whose greedy candidate is a planted kernel, guarded and halted after two repaired
outputs (the aiter greedy bug), torch behind it: the halt tests' one policy."""


@cache
def bundled() -> PolicySet:
    return load_policies([ROOT / "policies"])


def fixture(name: str) -> Platform:
    return load_platform(FIXTURES / f"{name}.json")


def with_device(name: str, **changes: Any) -> Platform:
    """A fixture with its devices' fields changed (e.g. arch, compute_units)."""
    platform = fixture(name)
    devices = tuple(d.replace(**changes) for d in platform.devices)
    changed: Platform = platform.replace(**{"devices": devices})
    return changed


def with_libraries(name: str, **versions: str | None) -> Platform:
    platform = fixture(name)
    libraries = dict(platform.libraries)
    for key, value in versions.items():
        dist = key.replace("_", "-")
        if value is None:
            libraries.pop(dist, None)
        else:
            libraries[dist] = value
    changed: Platform = platform.replace(**{"libraries": libraries})
    return changed


def resolve_on(platform: Platform | str, **env: str) -> Resolution:
    if isinstance(platform, str):
        platform = fixture(platform)
    return resolve_policies(platform, env, bundled())


SMALL_TRITON_TUNING: dict[str, int | bool] = {
    "group": 4, "group_block": 256, "top_groups": 64, "region": 64, "small": 32,
    "w_block": 256, "w_sub": 128, "large": 64, "cap": 256, "row_block": 256,
    "select_chunk": 64, "propose_block": 64,
}  # fmt: skip
"""The Triton sampler's tiles and buffers, shrunk (they are constexprs the host chooses) so that
the interpreter's sorts stay cheap; the kernel tests' vocabularies are small to match."""


class TritonSampler:
    """A Triton sampler for one test, built on its first call from what the test and its
    fixtures set before: tuning changes (small tiles on CPU), kernels replaced by spies, draws.
    Calling it samples (``Sampler.__call__``)."""

    def __init__(self, *, small: bool, **tuning: int | bool) -> None:
        self.tuning: dict[str, int | bool] = {**(SMALL_TRITON_TUNING if small else {}), **tuning}
        self.kernels: dict[str, Any] = {}
        self.draws: Any = None
        self.options: dict[str, Any] = {}
        self._sampler: Any = None

    @property
    def sampler(self) -> Any:
        """The :class:`~kernelpolicy.kernels.sampling_triton.Sampler` (built once)."""
        if self._sampler is None:
            from kernelpolicy.kernels.sampling_triton import Draws, Kernels, Sampler, Tuning

            self._sampler = Sampler(
                Tuning().replace(**self.tuning),
                kernels=Kernels().replace(**self.kernels),
                draws=self.draws or Draws(),
                **self.options,
            )
        return self._sampler

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.sampler(*args, **kwargs)


def _swap(owner: Any, name: str, replacement: Any) -> Callable[[], None]:
    """Set ``owner.name`` to ``replacement``; returns the function that puts the old one back."""
    real = getattr(owner, name)
    setattr(owner, name, replacement)

    def undo() -> None:
        setattr(owner, name, real)

    return undo


def patch_lang_once_per_launch(interpreter: ModuleType) -> Callable[[], None]:
    """Make Triton's interpreter patch ``triton.language`` once per kernel launch, not again at
    every call of a ``@triton.jit`` helper inside it, and return the function that undoes this.

    The interpreter (Triton 3.x) patches the language's builtins when a launch starts
    (``GridExecutor.__call__``) and restores them when it ends; each helper call inside
    (``InterpretedFunction.__call__``) scans the same modules again (``inspect.getmembers``)
    to patch what is patched already. Those scans took most of the kernel tests' time. A helper
    whose language modules are patched in its launch skips the scan; every other call patches
    as before (a helper's patch is never undone, as in Triton).

    Args:
        interpreter: the ``triton.runtime.interpreter`` module.

    Returns:
        A function that puts the interpreter's own functions back.
    """
    real_patch, real_launch = interpreter._patch_lang, interpreter.GridExecutor.__call__
    languages = (interpreter.tl, interpreter.tl.core)
    patched: list[frozenset[int] | None] = []  # per running launch: what is patched (None: none)

    @cache
    def modules(fn: Callable[..., Any]) -> frozenset[int]:
        values = fn.__globals__.values()
        return frozenset(id(v) for v in values if inspect.ismodule(v) and v in languages)

    def patch_lang(fn: Callable[..., Any]) -> Any:
        if patched and patched[-1] is not None and modules(fn) <= patched[-1]:
            return interpreter._LangPatchScope()  # a helper: its launch has patched these
        scope = real_patch(fn)
        if patched:  # the launch's own patch, or a helper's (never undone, as without this)
            patched[-1] = modules(fn) | (patched[-1] or frozenset())
        return scope

    def launch(self: Any, *args: Any, **kwargs: Any) -> Any:
        patched.append(None)
        try:
            return real_launch(self, *args, **kwargs)
        finally:
            patched.pop()

    undo_patch = _swap(interpreter, "_patch_lang", patch_lang)
    undo_launch = _swap(interpreter.GridExecutor, "__call__", launch)

    def undo() -> None:
        undo_patch()
        undo_launch()

    return undo


def reduce_xor_with_numpy(interpreter: ModuleType) -> Callable[[], None]:
    """Make Triton's interpreter reduce with ``^`` (``tl.xor_sum``) in one NumPy call, as it
    does sums, maxima and minima, and return the function that undoes this.

    Without it such a reduction falls back to ``generic_reduce``, a Python loop over every
    element, and ``tl.sort`` runs one per compare-and-swap stage: the sorts of the sampler's
    per-row and finishing kernels spent most of their time there. Xor is associative and
    commutative on integers, so the result is the same, bit for bit.

    Args:
        interpreter: the ``triton.runtime.interpreter`` module.

    Returns:
        A function that puts the interpreter's own ``ReduceOps.apply_impl`` back.
    """
    real = interpreter.ReduceOps.apply_impl
    xor = interpreter.tl.standard._xor_combine

    def apply_impl(self: Any, input: tuple[Any, ...]) -> Any:
        if self.combine_fn is not xor or len(input) != 1:
            return real(self, input)
        data = input[0].handle.data
        reduced = np.bitwise_xor.reduce(data, axis=self.axis, keepdims=self.keep_dims)
        return self.to_tensor(reduced, input[0].dtype)

    return _swap(interpreter.ReduceOps, "apply_impl", apply_impl)


def _like(value: Any, like: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``value`` (a combine function's result: an array, possibly of shape (1,) where a 1-D
    reduction's slices are 0-d, or a scalar) as an array of ``like``'s dtype and shape."""
    array = np.asarray(value, dtype=like.dtype)
    if array.size == like.size:
        return array.reshape(like.shape).copy()
    return np.broadcast_to(array, like.shape).copy()


def reduce_by_slices(interpreter: ModuleType) -> Callable[[], None]:
    """Make Triton's interpreter run a reduction with a combine function of its own (a
    ``tl.reduce`` the interpreter has no NumPy form for) one slice along the axis at a time,
    instead of one element at a time, and return the function that undoes this.

    ``ReduceOps.generic_reduce`` folds every element into its output position in turn, in index
    order along the axis, calling the combine function on scalars: a Python loop over the whole
    input. The combine functions of ``@triton.jit`` code apply elementwise, so folding whole
    slices in the same order (slice 0, then 1, ...) computes each output position from the same
    values in the same order, with ``axis``-length calls. Reductions over every axis (``axis``
    None) keep the interpreter's own path.

    Args:
        interpreter: the ``triton.runtime.interpreter`` module.

    Returns:
        A function that puts the interpreter's own ``ReduceOps.generic_reduce`` back.
    """
    real = interpreter.ReduceOps.generic_reduce
    tensor = interpreter.tl.core.tensor

    def generic_reduce(self: Any, input: tuple[Any, ...]) -> Any:
        if self.axis is None:
            return real(self, input)
        axis = self.axis
        data = [arg.handle.data for arg in input]
        acc = [np.take(d, 0, axis=axis) for d in data]
        for i in range(1, data[0].shape[axis]):
            left = tuple(self.to_tensor(a, arg.dtype) for a, arg in zip(acc, input, strict=True))
            right = tuple(
                self.to_tensor(np.take(d, i, axis=axis), arg.dtype)
                for d, arg in zip(data, input, strict=True)
            )
            out = self.combine_fn.fn(*left, *right)
            out = out if isinstance(out, tuple) else (out,)
            acc = [
                _like(o.handle.data if isinstance(o, tensor) else o, a)
                for o, a in zip(out, acc, strict=True)
            ]
        if self.keep_dims:
            acc = [np.expand_dims(a, axis) for a in acc]
        return [self.to_tensor(a, arg.dtype) for a, arg in zip(acc, input, strict=True)]

    return _swap(interpreter.ReduceOps, "generic_reduce", generic_reduce)


def promtool_check_metrics(text: str) -> None:
    """Prometheus' own ``promtool check metrics`` accepts the exposition ``text``, lint
    included (skipped where promtool is not installed)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    done = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "", done.stdout  # no lint findings either


# A cache entry made untrustworthy, as an attacker or a careless admin would leave it: the
# caches that hold validated values or code (settings memo, compiled code) must ignore each.
def plant_foreign_owner(path: Path) -> None:
    os.chown(path, 65534, 65534)


def plant_group_writable(path: Path) -> None:
    path.chmod(0o620)


def plant_symlink(path: Path) -> None:
    """``path`` becomes a link to its own content moved beside it."""
    target = path.with_name("elsewhere")
    path.rename(target)
    path.symlink_to(target)


def plant_open_ancestor(path: Path) -> None:
    """The directory two levels above ``path`` becomes writable by anyone (not sticky): its
    entry and its own directory stay ours, but anyone could rename that directory away and put
    their own in its place."""
    path.parent.parent.chmod(0o777)


UNTRUSTED_ENTRIES: dict[str, Callable[[Path], None]] = {
    "owned by another user": plant_foreign_owner,
    "group-writable": plant_group_writable,
    "a symbolic link": plant_symlink,
    "under a directory anyone can write": plant_open_ancestor,
}
"""The ways an entry is made untrustworthy, named, for a cache test's table of planted files."""


def make_certificate(directory: Path, name: str = "") -> tuple[Path, Path]:
    """A self-signed certificate for localhost and 127.0.0.1 and its unencrypted key
    (``cert{name}.pem``, ``key{name}.pem`` in ``directory``), made by openssl."""
    openssl = shutil.which("openssl")
    assert openssl, "openssl is needed to make a test certificate"
    cert, key = directory / f"cert{name}.pem", directory / f"key{name}.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def said_as_user(uid: int, ask: Callable[[], str]) -> str:
    """What ``ask()`` returns when run by ``uid`` (root only): in a forked child that becomes
    that user, its answer sent back through a pipe. The child exits 3 where it could not even
    run ``ask`` (the assertion on its status says so)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(read)
            os.setgid(uid)
            os.setuid(uid)
            os.write(write, ask().encode())
        except BaseException:
            code = 3
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        said = pipe.read().decode()
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0, f"the child of uid {uid} failed"
    return said


def wait_until(
    check: Callable[[], object], what: str = "never happened", seconds: float = 30
) -> None:
    """Poll ``check()`` until it is true; fail with ``what`` after ``seconds``: a bound on a
    hang, not a speed check (the one polling loop of the tests)."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)
