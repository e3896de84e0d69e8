"""Stage 1 of the flow: probe the machine into a :class:`Platform` snapshot."""

from typing import TYPE_CHECKING

from kernelpolicy._lazy import lazy_exports

if TYPE_CHECKING:
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

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        **dict.fromkeys(__all__, "kernelpolicy.platform.model"),
        "DEFAULT_LIBRARIES": "kernelpolicy.platform.libraries",
        "probe": "kernelpolicy.platform.probing",
    },
)
