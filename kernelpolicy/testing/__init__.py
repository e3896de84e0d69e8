"""Fakes for what a test machine lacks: NVML, the AMD KFD sysfs tree, real GPU hosts.

They ship with the package so that users can test their own policies the same way::

    from kernelpolicy.testing import FakeNVML, FakeNvidiaGpu
    platform = kernelpolicy.probe(nvml=FakeNVML([FakeNvidiaGpu.h100_sxm()]), root=tmp)
"""

from kernelpolicy.testing.fake_amdsmi import FakeAmdSmi, FakeAmdSmiGpu
from kernelpolicy.testing.fake_nvml import FakeNvidiaGpu, FakeNVML
from kernelpolicy.testing.fake_sysfs import FakeAmdGpu, write_kfd_tree
from kernelpolicy.testing.machines import MACHINES, Machine, probe_machine

__all__ = [
    "MACHINES",
    "FakeAmdGpu",
    "FakeAmdSmi",
    "FakeAmdSmiGpu",
    "FakeNVML",
    "FakeNvidiaGpu",
    "Machine",
    "probe_machine",
    "write_kfd_tree",
]
