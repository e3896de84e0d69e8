"""Shared fixtures: fake machines built with the fakes that ship in kernelpolicy.testing."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

# Under pytest-xdist every worker is one process per core: a worker's torch (and each CLI it
# starts, such as the `kernelpolicy verify` of docs/verify.md) gets one OpenMP thread instead of
# one per core. Several OpenMP teams spinning on too few cores were up to 6x slower here, and
# pushed that transcript past its 300 s limit on CI. Set before torch is imported anywhere.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
from hypothesis import HealthCheck, settings

from kernelpolicy.platform.fixtures import fixture_dir
from tests.helpers import patch_lang_once_per_launch, reduce_by_slices, reduce_xor_with_numpy

# What the tests and the processes they start write under the cache directory (the compiled-pack
# cache, the settings memo, evidence, kernel indexes) goes to a directory of this test process,
# removed at its exit, never to the user's ~/.cache/kernelpolicy. Tests of the default location
# set XDG_CACHE_HOME themselves.
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="kernelpolicy-tests-cache-")
atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], ignore_errors=True)

# The fuzz suite (tests/test_fuzz_*.py): a fast, deterministic profile for CI, a long one for
# release checks (HYPOTHESIS_PROFILE=release pytest tests/test_fuzz_*.py). Fuzz tests take their
# example count from the profile (no max_examples of their own).
settings.register_profile(
    "ci",
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "release",
    max_examples=20_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# The tests that take the longest, collected first so that pytest-xdist starts them while the
# short ones keep the other worker busy, instead of finding one late and waiting on it: the
# sm_90 compile check takes about 280 s of CPU on a cold Triton cache, up to 100 s a case.
LONGEST_FIRST = ("tests/test_kernels_triton_compile.py::",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move the :data:`LONGEST_FIRST` tests to the front, the rest keeping their order."""
    items.sort(key=lambda item: not item.nodeid.startswith(LONGEST_FIRST))


@pytest.fixture
def fixtures() -> Path:
    return fixture_dir()


@pytest.fixture
def empty_root(tmp_path: Path) -> Path:
    """A filesystem root with nothing in it: no sysfs, no /opt/rocm, no torch."""
    root = tmp_path / "root"
    root.mkdir()
    return root


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A root-owned directory under /tmp, removed after the test: a socket path holds 107
    bytes, and pytest's own directories are long and 0700 (another user could not enter)."""
    directory = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def faster_triton_interpreter() -> Iterator[None]:
    """Where the kernel tests run in Triton's interpreter (their modules set TRITON_INTERPRET
    when collected), three of its slow paths are made fast, with the same results: see
    :func:`tests.helpers.patch_lang_once_per_launch`, :func:`tests.helpers.reduce_xor_with_numpy`
    and :func:`tests.helpers.reduce_by_slices`."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        yield
        return
    try:
        from triton.runtime import interpreter
    except ImportError:  # no Triton: its tests skip
        yield
        return
    undo = []
    for speed_up in (patch_lang_once_per_launch, reduce_xor_with_numpy, reduce_by_slices):
        # another Triton's internals: slower, and the tests of
        # tests/test_kernels_triton_interpreter.py fail, instead of every test erroring
        with contextlib.suppress(AttributeError):
            undo.append(speed_up(interpreter))
    yield
    for step in reversed(undo):
        step()
