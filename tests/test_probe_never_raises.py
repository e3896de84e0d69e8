"""probe() never raises, whatever the sysfs tree holds."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernelpolicy import probe
from kernelpolicy.testing import write_kfd_tree
from kernelpolicy.testing.machines import MI300X

NODE = "sys/class/kfd/kfd/topology/nodes/2"


@settings(max_examples=60, deadline=None)
@given(
    properties=st.binary(max_size=400),
    bank=st.binary(max_size=100),
    rocm=st.binary(max_size=40),
)
def test_garbage_sysfs_never_raises(properties: bytes, bank: bytes, rocm: bytes) -> None:
    """Arbitrary bytes in properties, mem_banks and the ROCm version file give a Platform."""
    with tempfile.TemporaryDirectory() as tmp:
        root = write_kfd_tree(Path(tmp), [MI300X, MI300X], rocm_version="6.3.1")
        (root / NODE / "properties").write_bytes(properties)
        (root / NODE / "mem_banks/0/properties").write_bytes(bank)
        (root / "opt/rocm/.info/version").write_bytes(rocm)
        platform = probe(root=root, nvml=None, amdsmi=None, environ={}, metadata=lambda n: None)
        assert platform.vendor == "amd"
        assert 1 <= len(platform.devices) <= 2


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(
            lambda p: p.write_bytes(b"NVRM version: \xff\xfe 580.159.04 x"), id="bad-utf8"
        ),
        pytest.param(os.mkfifo, id="fifo"),
        pytest.param(lambda p: p.write_bytes(b"9" * (64 * 1024 + 1)), id="over-limit"),
    ],
)
def test_proc_driver_version_never_raises_or_hangs(tmp_path: Path, make: object) -> None:
    """/proc/driver/nvidia/version is read bounded: bad bytes, a FIFO or a huge file never
    raise or block; a readable version is still found among undecodable bytes."""
    from kernelpolicy.platform.pci import nvidia_proc_driver_version

    path = tmp_path / "proc/driver/nvidia/version"
    path.parent.mkdir(parents=True)
    make(path)  # type: ignore[operator]
    found = nvidia_proc_driver_version(tmp_path)
    assert found in (None, "580.159.04")
