"""A variant's record in the kernel cache is kept under what Triton's own cache key depends on
(review S2; kernelpolicy/kernels/sampling_triton/cached.py ``describe``): Triton's
cache-invalidating environment variables, the environment its compile options and ptxas are
read from, the ptxas binary and libtriton's build. A process whose environment differs from
the one ``warm`` built under finds no record (its build runs in the background) where it used
to find one and compile inline, in the call."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelpolicy.kernels.sampling_triton import cached, preload
from kernelpolicy.kernels.sampling_triton.tuning import Tuning
from kernelpolicy.kernels.sampling_triton.variants import Variant

VARIANT = Variant("cpu", torch.float32, torch.int64, (True, False, False), 300, 32)
KNOWN = (
    "TRITON_DEFAULT_FP_FUSION", "TRITON_FORCE_DISABLE_FP_FUSION", "TRITON_DISABLE_LINE_INFO",
    "LLVM_IR_ENABLE_DUMP", "PTXAS_OPTIONS", "TRITON_LIBDEVICE_PATH", "TRITON_MOCK_PTX_VERSION",
    "TRITON_PTXAS_PATH", "TRITON_PTXAS_BLACKWELL_PATH",
)  # fmt: skip


def key_under(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env: dict[str, str], where: str
) -> str:
    """The record key of VARIANT with exactly ``env`` of the variables above set ("{tmp}"
    in a value is a folder of its own, ``where``)."""
    folder = tmp_path / where
    folder.mkdir(exist_ok=True)
    with monkeypatch.context() as patch:
        for name in KNOWN:
            patch.delenv(name, raising=False)
        for name, value in env.items():
            patch.setenv(name, value.replace("{tmp}", str(folder)))
        return cached.describe(Tuning(), VARIANT)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        pytest.param({}, {"TRITON_DEFAULT_FP_FUSION": "0"}, id="fp-fusion-default-set"),
        pytest.param(
            {"TRITON_DEFAULT_FP_FUSION": "1"},
            {"TRITON_DEFAULT_FP_FUSION": "0"},
            id="fp-fusion-on-off",
        ),
        pytest.param({}, {"TRITON_FORCE_DISABLE_FP_FUSION": "1"}, id="fp-fusion-forced-off"),
        pytest.param({}, {"TRITON_DISABLE_LINE_INFO": "1"}, id="line-info-off"),
        pytest.param({}, {"LLVM_IR_ENABLE_DUMP": "1"}, id="llvm-dump"),
        pytest.param({}, {"PTXAS_OPTIONS": "--maxrregcount=64"}, id="ptxas-options"),
        pytest.param({}, {"TRITON_MOCK_PTX_VERSION": "12.4"}, id="mock-ptx-version"),
        pytest.param({}, {"TRITON_LIBDEVICE_PATH": "{tmp}/libdevice.bc"}, id="libdevice-path"),
        pytest.param({}, {"TRITON_PTXAS_PATH": "{tmp}/ptxas"}, id="ptxas-path"),
        pytest.param({}, {"TRITON_PTXAS_BLACKWELL_PATH": "{tmp}/ptxas"}, id="ptxas-blackwell-path"),
    ],
)
def test_an_environment_that_changes_tritons_key_changes_the_record_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, one: dict[str, str], other: dict[str, str]
) -> None:
    """Each variable Triton's key reads, set or changed: another record key."""
    assert key_under(monkeypatch, tmp_path, one, "a") != key_under(
        monkeypatch, tmp_path, other, "a"
    )


@pytest.mark.parametrize(
    "variable",
    [
        pytest.param("TRITON_PTXAS_PATH", id="ptxas"),
        pytest.param("TRITON_PTXAS_BLACKWELL_PATH", id="ptxas-blackwell"),
        pytest.param("TRITON_LIBDEVICE_PATH", id="libdevice"),
    ],
)
def test_another_file_at_the_same_path_changes_the_record_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str
) -> None:
    """Another ptxas (another CUDA toolkit) or libdevice at the path a variable names: the
    path alone is not the key, the file's size and modification time are in it."""
    env = {variable: "{tmp}/tool"}
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "tool").write_text("release 12.8")
    before = key_under(monkeypatch, tmp_path, env, "a")
    (tmp_path / "a" / "tool").write_text("release 13.0, a longer binary")
    assert key_under(monkeypatch, tmp_path, env, "a") != before


def test_another_libtriton_build_changes_the_record_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """libtriton's stamp (its size and modification time, as the index's key has it) is in
    the record key: a reinstalled Triton of the same version is a miss."""
    one = key_under(monkeypatch, tmp_path, {}, "a")
    monkeypatch.setattr(preload, "library_stamp", lambda: "libtriton.so:1:2")
    assert key_under(monkeypatch, tmp_path, {}, "a") != one


@pytest.mark.parametrize(
    "env",
    [
        pytest.param({}, id="nothing-set"),
        pytest.param(
            {"TRITON_DEFAULT_FP_FUSION": "0", "TRITON_DISABLE_LINE_INFO": "1"}, id="invalidating"
        ),
        pytest.param({"PTXAS_OPTIONS": "-O3", "TRITON_PTXAS_PATH": "{tmp}/ptxas"}, id="ptxas"),
    ],
)
def test_the_same_environment_gives_the_same_record_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env: dict[str, str]
) -> None:
    """warm and a worker under one environment agree on the key."""
    assert key_under(monkeypatch, tmp_path, env, "a") == key_under(monkeypatch, tmp_path, env, "a")


def test_unrelated_variables_leave_the_record_key_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A variable Triton's key does not read (its cache folder: warm's and the worker's are
    the same cache, named differently) is not in the key."""
    one = key_under(monkeypatch, tmp_path, {}, "a")
    with monkeypatch.context() as patch:
        patch.setenv("TRITON_CACHE_DIR", str(tmp_path / "elsewhere"))
        patch.setenv("KERNELPOLICY_UNRELATED", "1")
        assert key_under(monkeypatch, tmp_path, {}, "a") == one
