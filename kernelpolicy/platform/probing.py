"""``probe()``: what machine is this? Fast, no GPU context, and it never raises."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelpolicy.errors import KernelPolicyError
from kernelpolicy.platform.envvars import DEFAULT_ENV_PATTERNS, capture_env
from kernelpolicy.platform.faults import describe
from kernelpolicy.platform.hardware_cache import hardware_key, load_hardware, store_hardware
from kernelpolicy.platform.identity import read_machine_id
from kernelpolicy.platform.libraries import (
    DEFAULT_LIBRARIES,
    MetadataVersion,
    installed_version,
    read_libraries,
    torch_build,
)
from kernelpolicy.platform.model import Platform, PlatformValueError
from kernelpolicy.platform.pci import (
    AMD_VENDOR,
    NVIDIA_VENDOR,
    nvidia_evidence,
    nvidia_proc_driver_version,
    pci_gpus,
)

if TYPE_CHECKING:
    from kernelpolicy.platform.amd import AmdReport
    from kernelpolicy.platform.nvidia import NvidiaReport

_AUTO: Any = object()
# Where a GPU driver shows itself besides the PCI bus (the vendor probes look at the same).
_DRIVER_SIGNS = (
    "proc/driver/nvidia/version", "dev/nvidiactl", "dev/kfd", "sys/class/kfd/kfd/topology/nodes"
)  # fmt: skip


def probe(
    *,
    root: str | Path = "/",
    nvml: Any = _AUTO,
    amdsmi: Any = _AUTO,
    environ: Mapping[str, str] | None = None,
    libraries: Iterable[str] = (),
    env_patterns: Iterable[str] | None = None,
    metadata: MetadataVersion = installed_version,
    torch_version_file: Path | None = None,
    hardware_cache: Path | None = None,
) -> Platform:
    """Detect the GPU vendor, devices, driver, torch build and kernel libraries.

    Every argument is a seam for tests and for answering about another machine; the defaults
    read this one.

    Args:
        root: Filesystem root for sysfs, ``/proc`` and ``/opt/rocm`` reads.
        nvml: An NVML object (``pynvml`` or ``kernelpolicy.testing.FakeNVML``); ``None`` skips NVML.
        amdsmi: An amdsmi module for the AMD fallback; ``None`` skips it.
        environ: The environment to read (default ``os.environ``), never written.
        libraries: Distribution names to report besides :data:`DEFAULT_LIBRARIES`.
        env_patterns: The variable names (or shell patterns) the policies read: only these are
            captured in ``Platform.env``. Default: :data:`DEFAULT_ENV_PATTERNS` (what the
            bundled policies read, and forced implementations).
        metadata: Looks a distribution's version up (default: importlib.metadata).
        torch_version_file: The ``torch/version.py`` to read (default: found next to torch).
        hardware_cache: A cache directory: take the vendor, devices and driver from its
            hardware file where its key still holds, else probe them and write it (see
            :mod:`kernelpolicy.platform.hardware_cache`). Default: probe every time.

    Returns:
        The snapshot. Whatever could not be read is listed in ``probe_errors``.
    """
    env = dict(os.environ if environ is None else environ)
    root_path = Path(root)
    errors: list[str] = []
    key, cached, nvidia, amd = _hardware_sources(
        root_path, env, errors, nvml=nvml, amdsmi=amdsmi, cache=hardware_cache
    )
    software = _software(
        root_path, env, errors, libraries=(*DEFAULT_LIBRARIES, *libraries),
        env_patterns=DEFAULT_ENV_PATTERNS if env_patterns is None else env_patterns,
        metadata=metadata, torch_version_file=torch_version_file,
    )  # fmt: skip
    fields: dict[str, Any] = {"vendor": "none", **software}  # until a vendor report says
    if cached is not None:
        return _from_cache(fields, cached, errors)
    return _with_hardware(fields, nvidia, amd, errors, cache=hardware_cache, key=key)


def _hardware_sources(
    root: Path,
    env: dict[str, str],
    errors: list[str],
    *,
    nvml: Any,
    amdsmi: Any,
    cache: Path | None,
) -> tuple[dict[str, Any] | None, dict[str, Any] | None, NvidiaReport | None, AmdReport | None]:
    """Where the vendor, devices and driver come from: the hardware cache's facts for this
    machine, else the vendor probes (neither where the machine shows no sign of a GPU).

    Returns:
        The cache key (``None``: nothing to cache), the cached facts (``None``: not cached),
        and the NVIDIA and AMD reports (``None``: not probed, or nothing found).
    """
    auto = nvml is _AUTO and amdsmi is _AUTO
    on_bus = pci_gpus(root, NVIDIA_VENDOR, AMD_VENDOR) if auto or cache else []
    bare = auto and _no_gpu(root, on_bus)
    key = hardware_key(root, env, on_bus) if cache and not bare else None
    cached = load_hardware(cache, key) if cache and key else None
    if cached is not None or bare:
        return key, cached, None, None
    nvidia = _guard("nvidia", errors, lambda: _probe_nvidia(root, nvml, env), None)
    amd = _guard("amd", errors, lambda: _probe_amd(root, amdsmi, env, nvidia), None)
    return key, cached, nvidia, amd


def _software(
    root: Path,
    env: dict[str, str],
    errors: list[str],
    *,
    libraries: Iterable[str],
    env_patterns: Iterable[str],
    metadata: MetadataVersion,
    torch_version_file: Path | None,
) -> dict[str, Any]:
    """The snapshot's fields that need no GPU: the libraries' versions, the variables the
    policies read, the torch build and the machine id; what cannot be read goes to ``errors``."""
    libs = read_libraries(libraries, metadata)
    errors.extend(libs.errors)
    torch = _guard(
        "torch build",
        errors,
        lambda: torch_build(libs.versions.get("torch"), errors, torch_version_file),
        None,
    )
    fields: dict[str, Any] = {"libraries": libs.versions, "env": capture_env(env, env_patterns)}
    if torch is not None:
        fields["torch"] = torch
    machine_id = read_machine_id(root)
    if machine_id is not None:
        fields["machine_id"] = machine_id
    return fields


def _with_hardware(
    fields: dict[str, Any],
    nvidia: NvidiaReport | None,
    amd: AmdReport | None,
    errors: list[str],
    *,
    cache: Path | None,
    key: dict[str, Any] | None,
) -> Platform:
    """The snapshot with the vendor reports' hardware, written to the hardware cache only
    where the hardware came out without a probe error."""
    hardware_errors = len(errors)
    fields.update(_hardware(nvidia, amd, errors))
    platform = _assemble(fields, errors)
    if cache is not None and key is not None and len(errors) == hardware_errors:
        store_hardware(cache, key, platform.to_dict())  # best effort: never raises
    return platform


def _no_gpu(root: Path, on_bus: list[str]) -> bool:
    """No sign of a GPU: none on the PCI bus, no NVIDIA or KFD driver file or device node.

    Both vendor probes find nothing on such a machine (a CPU-only node), so neither runs nor is
    imported, and nothing is cached: reading the hardware file would cost more than the probe.
    """
    return not on_bus and not any((root / sign).exists() for sign in _DRIVER_SIGNS)


def _from_cache(fields: dict[str, Any], cached: dict[str, Any], errors: list[str]) -> Platform:
    """The snapshot with the cached hardware facts; a cache the model refuses is a probe
    error and leaves the hardware unknown (the next probe with no cache rewrites it)."""
    snapshot = {
        **{k: v for k, v in fields.items() if k != "torch"}, **cached,
        "torch": fields["torch"].to_dict() if "torch" in fields else {},
        "probe_errors": list(errors),
    }  # fmt: skip
    try:
        return Platform.from_dict(snapshot, source="hardware cache")
    except KernelPolicyError as exc:
        errors.append(f"hardware cache ignored: {describe(exc)}")
        return _assemble(fields, errors)


def _assemble(fields: dict[str, Any], errors: list[str]) -> Platform:
    """The Platform, even when a stage produced a value the model refuses: that value is
    dropped (reported in ``probe_errors``), so that the probe never raises."""
    try:
        return Platform(**fields, probe_errors=tuple(errors))
    except PlatformValueError as exc:
        bad = {where.split(".")[0] for where, _ in exc.problems}
        errors.append(f"probe: dropped {', '.join(sorted(bad))}: {describe(exc)}")
        kept = {k: v for k, v in fields.items() if k not in bad}
        return Platform(**kept, probe_errors=tuple(errors))


def _hardware(
    nvidia: NvidiaReport | None, amd: AmdReport | None, errors: list[str]
) -> dict[str, Any]:
    """Vendor, devices and driver from the vendor reports; their errors go to ``errors``."""
    fields: dict[str, Any] = {}
    if nvidia is not None:
        # NVML is up, or an NVIDIA GPU is on the bus and NVML failed: an NVIDIA host either way.
        errors.extend(nvidia.errors)
        if nvidia.init_error:
            errors.append(nvidia.init_error)
        fields["vendor"] = "nvidia"
        fields["devices"] = tuple(nvidia.devices)
        # A mapping, validated by _assemble: a driver string the model refuses is dropped.
        fields["driver"] = {"version": nvidia.driver_version, "cuda": nvidia.cuda_version}
    if amd is not None:
        errors.extend(amd.errors)
        if amd.devices and not fields:
            fields["vendor"] = "amd"
            fields["devices"] = tuple(amd.devices)
            fields["driver"] = {"version": amd.driver_version, "rocm": amd.rocm_version}
        elif amd.devices:
            errors.append("amd: AMD GPUs found beside NVIDIA ones; reporting the NVIDIA devices")
    return fields


def _probe_nvidia(root: Path, nvml: Any, env: dict[str, str]) -> NvidiaReport | None:
    if nvml is None:
        return None
    from kernelpolicy.platform.nvidia import load_nvml, probe_nvidia

    if nvml is _AUTO:
        if not nvidia_evidence(root):
            return None  # no NVIDIA driver, device node or PCI function: skip loading NVML
        nvml = load_nvml()
    report = probe_nvidia(nvml, env)
    if report.available:
        return report
    # NVML would not start. That is a fault only where an NVIDIA GPU is actually present.
    present = pci_gpus(root, NVIDIA_VENDOR)
    driver = nvidia_proc_driver_version(root)
    if not present and driver is None:
        return None
    where = ", ".join(present) or "per /proc/driver/nvidia"
    report.init_error = (
        f"{report.init_error} (NVIDIA GPU present: {where}); NVIDIA kernels fall back"
    )
    report.driver_version = driver
    return report


def _probe_amd(
    root: Path, amdsmi: Any, env: dict[str, str], nvidia: NvidiaReport | None
) -> AmdReport:
    if amdsmi is _AUTO:
        # amdsmi is a fallback for AMD hosts only; importing it elsewhere is wasted time.
        amdsmi = None
        if nvidia is None and (root / "dev/kfd").exists():
            from kernelpolicy.platform.amdsmi_fallback import load_amdsmi

            amdsmi = load_amdsmi()
    from kernelpolicy.platform.amd import probe_amd

    return probe_amd(root, env, amdsmi)


def _guard(stage: str, errors: list[str], work: Any, default: Any) -> Any:
    """Run one probe stage; an unexpected exception becomes a probe error, never a crash."""
    try:
        return work()
    except Exception as exc:
        errors.append(f"{stage}: unexpected {describe(exc)}")
        return default
