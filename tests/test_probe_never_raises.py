"""probe() never raises, whatever the sysfs tree holds."""

from __future__ import annotations

import tempfile
from pathlib import Path

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
