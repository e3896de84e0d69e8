"""kernelpolicy: which kernel runs on this GPU, and why.

The public API is what ``__all__`` lists. Names load on first use, so ``import kernelpolicy`` is
cheap and never imports torch, grpc, flashinfer or aiter, probes hardware or reads the environment.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "DaemonError": "kernelpolicy.errors",
    "Decision": "kernelpolicy.engine.model",
    "connect": "kernelpolicy.server.client",
    "PolicyError": "kernelpolicy.errors",
    "PolicySet": "kernelpolicy.policy.compiled",
    "Reason": "kernelpolicy.engine.model",
    "Resolution": "kernelpolicy.engine.resolution",
    "ResolutionError": "kernelpolicy.errors",
    "load_policies": "kernelpolicy.policy.loader",
    "resolve": "kernelpolicy.api",
    "Capability": "kernelpolicy.platform.model",
    "Device": "kernelpolicy.platform.model",
    "DriverInfo": "kernelpolicy.platform.model",
    "KernelPolicyError": "kernelpolicy.errors",
    "Platform": "kernelpolicy.platform.model",
    "PlatformFileError": "kernelpolicy.errors",
    "SettingsError": "kernelpolicy.errors",
    "TorchBuild": "kernelpolicy.platform.model",
    "UntrustedFileError": "kernelpolicy.errors",
    "VersionError": "kernelpolicy.errors",
    "load_platform": "kernelpolicy.platform.model",
    "parse_version": "kernelpolicy.versions",
    "probe": "kernelpolicy.platform.probing",
}

__all__ = [
    "Capability",
    "DaemonError",
    "Decision",
    "Device",
    "DriverInfo",
    "KernelPolicyError",
    "Platform",
    "PlatformFileError",
    "PolicyError",
    "PolicySet",
    "Reason",
    "Resolution",
    "ResolutionError",
    "SettingsError",
    "TorchBuild",
    "UntrustedFileError",
    "VersionError",
    "__version__",
    "connect",
    "load_platform",
    "load_policies",
    "parse_version",
    "probe",
    "resolve",
]

if TYPE_CHECKING:
    from kernelpolicy.api import resolve as resolve
    from kernelpolicy.engine.model import Decision as Decision
    from kernelpolicy.engine.model import Reason as Reason
    from kernelpolicy.engine.resolution import Resolution as Resolution
    from kernelpolicy.errors import DaemonError as DaemonError
    from kernelpolicy.errors import (
        KernelPolicyError as KernelPolicyError,
    )
    from kernelpolicy.errors import (
        PlatformFileError as PlatformFileError,
    )
    from kernelpolicy.errors import PolicyError as PolicyError
    from kernelpolicy.errors import ResolutionError as ResolutionError
    from kernelpolicy.errors import (
        SettingsError as SettingsError,
    )
    from kernelpolicy.errors import UntrustedFileError as UntrustedFileError
    from kernelpolicy.errors import (
        VersionError as VersionError,
    )
    from kernelpolicy.platform.model import (
        Capability as Capability,
    )
    from kernelpolicy.platform.model import (
        Device as Device,
    )
    from kernelpolicy.platform.model import (
        DriverInfo as DriverInfo,
    )
    from kernelpolicy.platform.model import (
        Platform as Platform,
    )
    from kernelpolicy.platform.model import (
        TorchBuild as TorchBuild,
    )
    from kernelpolicy.platform.model import (
        load_platform as load_platform,
    )
    from kernelpolicy.platform.probing import probe as probe
    from kernelpolicy.policy.compiled import PolicySet as PolicySet
    from kernelpolicy.policy.loader import load_policies as load_policies
    from kernelpolicy.server.client import connect as connect
    from kernelpolicy.versions import KERNELPOLICY_VERSION as __version__
    from kernelpolicy.versions import parse_version as parse_version


def __getattr__(name: str) -> Any:
    if name == "__version__":  # its home is the core layer (kernelpolicy.versions)
        from kernelpolicy.versions import KERNELPOLICY_VERSION

        globals()[name] = KERNELPOLICY_VERSION
        return KERNELPOLICY_VERSION
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kernelpolicy' has no attribute {name!r}")
    from kernelpolicy.code_cache import code_cached
    from kernelpolicy.gcpause import collector_paused

    # Importing the front door in a worker: see kernelpolicy.gcpause, kernelpolicy.code_cache.
    with collector_paused(), code_cached():
        value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
