"""Stage 1 of the flow: probe the machine into a :class:`Platform` snapshot."""

from kernelpolicy.platform.libraries import DEFAULT_LIBRARIES
from kernelpolicy.platform.model import (
    SCHEMA,
    Capability,
    Device,
    DriverInfo,
    Platform,
    TorchBuild,
    load_platform,
)
from kernelpolicy.platform.probing import probe

__all__ = [
    "DEFAULT_LIBRARIES",
    "SCHEMA",
    "Capability",
    "Device",
    "DriverInfo",
    "Platform",
    "TorchBuild",
    "load_platform",
    "probe",
]
