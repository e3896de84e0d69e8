"""The node's hardware facts kept between processes: a second probe takes them from the cache
while its key holds, probes again when it does not, and never trusts a file it should not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.platform.hardware_cache import RELATIVE, hardware_key
from kernelpolicy.platform.probing import probe
from kernelpolicy.testing import FakeNVML
from kernelpolicy.testing.machines import H100_SXM

NOBODY = 65534


def _root(tmp_path: Path, boot: str = "boot-1") -> Path:
    root = tmp_path / "root"
    (root / "proc/sys/kernel/random").mkdir(parents=True, exist_ok=True)
    (root / "proc/sys/kernel/random/boot_id").write_text(boot + "\n")
    return root


class CountingNVML(FakeNVML):
    """A fake NVML that counts its initialisations (each is a real probe)."""

    inits = 0

    def nvmlInit(self) -> None:
        type(self).inits += 1
        super().nvmlInit()


def _probe(root: Path, cache: Path | None, gpus: int = 2, **env: str) -> Any:
    nvml = CountingNVML([H100_SXM.with_slot(i) for i in range(gpus)])
    return probe(root=root, nvml=nvml, amdsmi=None, environ=env, metadata=lambda n: None,
                 hardware_cache=cache)  # fmt: skip


@pytest.fixture(autouse=True)
def _reset() -> None:
    CountingNVML.inits = 0


def test_a_second_probe_takes_the_hardware_from_the_cache(tmp_path: Path) -> None:
    root, cache = _root(tmp_path), tmp_path / "cache"
    first = _probe(root, cache)
    assert CountingNVML.inits == 1
    assert (cache / RELATIVE).exists()
    second = _probe(root, cache)
    assert CountingNVML.inits == 1  # no NVML the second time
    assert second.to_dict() == first.to_dict()
    assert second.devices[0].name == "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize(
    ("change", "env"),
    [
        pytest.param("reboot", {}, id="a-reboot"),
        pytest.param("driver", {}, id="a-driver-update"),
        pytest.param(None, {"CUDA_VISIBLE_DEVICES": "1"}, id="other-visible-devices"),
    ],
)
def test_anything_that_makes_it_stale_probes_again(
    tmp_path: Path, change: str | None, env: dict[str, str]
) -> None:
    root, cache = _root(tmp_path), tmp_path / "cache"
    _probe(root, cache)
    if change == "reboot":
        _root(tmp_path, "boot-2")
    elif change == "driver":
        (root / "proc/driver/nvidia").mkdir(parents=True)
        (root / "proc/driver/nvidia/version").write_text(
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu\n"
        )
    _probe(root, cache, **env)
    assert CountingNVML.inits == 2


def test_no_boot_id_no_cache(tmp_path: Path) -> None:
    """Where the boot cannot be told (no /proc), nothing is cached or read."""
    root, cache = tmp_path / "bare", tmp_path / "cache"
    root.mkdir()
    assert hardware_key(root, {}) is None
    _probe(root, cache)
    _probe(root, cache)
    assert CountingNVML.inits == 2
    assert not (cache / RELATIVE).exists()


def _plant(path: Path, how: str, tmp_path: Path) -> None:
    if how == "foreign-owner":
        os.chown(path, NOBODY, NOBODY)
    elif how == "group-writable":
        path.chmod(0o664)
    elif how == "directory-group-writable":
        path.parent.chmod(0o770)
    elif how == "symlink-to-foreign":
        elsewhere = tmp_path / "elsewhere.json"
        elsewhere.write_bytes(path.read_bytes())
        os.chown(elsewhere, NOBODY, NOBODY)
        path.unlink()
        path.symlink_to(elsewhere)
    elif how == "not-json":
        path.write_text("{not json")
    elif how == "oversized":
        path.write_text(" " * (300 * 1024) + "{}")
    elif how == "wrong-shape":
        path.write_text('{"key": 1, "hardware": []}')


@pytest.mark.skipif(os.geteuid() != 0, reason="planting a foreign owner needs root")
@pytest.mark.parametrize(
    "how",
    [
        "foreign-owner", "group-writable", "directory-group-writable", "symlink-to-foreign",
        "not-json", "oversized", "wrong-shape",
    ],
)  # fmt: skip
def test_an_untrusted_or_broken_cache_is_ignored(tmp_path: Path, how: str) -> None:
    """Planted, foreign-owned, group-writable, symlinked or broken: probed again."""
    root, cache = _root(tmp_path), tmp_path / "cache"
    _probe(root, cache, gpus=2)
    _plant(cache / RELATIVE, how, tmp_path)
    platform = _probe(root, cache, gpus=2)
    assert CountingNVML.inits == 2
    assert len(platform.devices) == 2


def test_a_forged_cache_of_another_key_is_ignored(tmp_path: Path) -> None:
    """A file from another boot (or node) whose key does not match is never used."""
    root, cache = _root(tmp_path), tmp_path / "cache"
    _probe(root, cache, gpus=2)
    path = cache / RELATIVE
    path.write_text(path.read_text().replace("boot-1", "boot-0"))
    assert len(_probe(root, cache, gpus=2).devices) == 2
    assert CountingNVML.inits == 2


@pytest.mark.parametrize(
    ("sign", "cached"),
    [
        pytest.param(None, False, id="no-gpu-sign"),
        pytest.param("dev/nvidiactl", True, id="nvidia-device-node"),
        pytest.param("proc/driver/nvidia/version", True, id="nvidia-kernel-module"),
    ],
)
def test_a_machine_without_gpus_is_probed_not_cached(
    tmp_path: Path, sign: str | None, cached: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no GPU on the PCI bus and no driver file or device node, the default probe finds
    no GPU without reading or writing the hardware file (cheaper than the file); any sign of
    a GPU probes and caches as before."""
    root, cache = _root(tmp_path), tmp_path / "cache"
    if sign is not None:
        (root / sign).parent.mkdir(parents=True, exist_ok=True)
        (root / sign).write_text("")
    monkeypatch.setattr("kernelpolicy.platform.nvidia.load_nvml", lambda: CountingNVML([H100_SXM]))
    platform = probe(root=root, environ={}, metadata=lambda n: None, hardware_cache=cache)
    assert (cache / RELATIVE).exists() is cached
    assert platform.vendor == ("nvidia" if cached else "none")
    assert CountingNVML.inits == int(cached)


def test_a_machine_without_gpus_imports_no_vendor_probe(tmp_path: Path) -> None:
    """The default probe of a machine without GPUs imports neither vendor's probe module."""
    root = _root(tmp_path)
    code = (
        "import sys; from kernelpolicy.platform.probing import probe; "
        f"p = probe(root={str(root)!r}, environ={{}}, hardware_cache=None); "
        "print(p.vendor, sorted(m for m in sys.modules if m in "
        "('kernelpolicy.platform.amd', 'kernelpolicy.platform.nvidia', 'pynvml')))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "none []"
