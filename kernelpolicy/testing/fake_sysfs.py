"""Write a KFD sysfs topology tree as the amdgpu driver lays it out.

``write_kfd_tree(root, gpus)`` creates ``root/sys/class/kfd/kfd/topology/nodes/<n>/properties``
(CPU nodes first, as on real hosts), ``mem_banks/0/properties``, the PCI ``revision`` files, and
optionally ``/sys/module/amdgpu/version`` and ``/opt/rocm/.info/version``. The key set and order
of each properties file follow the driver's ``kfd_topology.c``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class FakeAmdGpu:
    """One KFD GPU node (for MI250X: one GCD)."""

    device_id: int
    gfx_target_version: int
    compute_units: int
    simd_per_cu: int
    vram_bytes: int
    wave_front_size: int = 64
    num_xcc: int = 1
    max_engine_clk_fcompute: int = 2100
    revision: int = 0x00
    extra: dict[str, int] = field(default_factory=dict)


def _gpu_properties(gpu: FakeAmdGpu, slot: int) -> list[tuple[str, int]]:
    bus = 0x0C + 0x10 * slot
    return [
        ("cpu_cores_count", 0),
        ("simd_count", gpu.compute_units * gpu.simd_per_cu),
        ("mem_banks_count", 1),
        ("caches_count", 0),
        ("io_links_count", 1),
        ("p2p_links_count", 0),
        ("cpu_core_id_base", 0),
        ("simd_id_base", 2147487744 + slot * 4096),
        ("max_waves_per_simd", 8 if gpu.wave_front_size == 64 else 16),
        ("lds_size_in_kb", 64),
        ("gds_size_in_kb", 0),
        ("num_gws", 64),
        ("wave_front_size", gpu.wave_front_size),
        ("array_count", 4 * gpu.num_xcc),
        ("simd_arrays_per_engine", 1),
        ("cu_per_simd_array", -(-gpu.compute_units // (4 * gpu.num_xcc))),
        ("simd_per_cu", gpu.simd_per_cu),
        ("max_slots_scratch_cu", 32),
        ("gfx_target_version", gpu.gfx_target_version),
        ("vendor_id", 0x1002),
        ("device_id", gpu.device_id),
        ("location_id", bus << 8),
        ("domain", 0),
        ("drm_render_minor", 128 + slot),
        ("hive_id", 0),
        ("num_sdma_engines", 2),
        ("num_sdma_xgmi_engines", 6),
        ("num_sdma_queues_per_engine", 8),
        ("num_cp_queues", 24),
        ("max_engine_clk_fcompute", gpu.max_engine_clk_fcompute),
        ("local_mem_size", 0),
        ("fw_version", 177),
        ("capability", 746455680),
        ("debug_prop", 1495),
        ("sdma_fw_version", 19),
        ("unique_id", 0x5A2B000000000000 + 0x1111 * (slot + 1)),
        ("num_xcc", gpu.num_xcc),
        ("max_engine_clk_ccompute", 3250),
        *gpu.extra.items(),
    ]


def _cpu_properties(cores: int, node: int) -> list[tuple[str, int]]:
    return [
        ("cpu_cores_count", cores),
        ("simd_count", 0),
        ("mem_banks_count", 1),
        ("caches_count", 0),
        ("io_links_count", 0),
        ("p2p_links_count", 0),
        ("cpu_core_id_base", node * cores),
        ("simd_id_base", 0),
        ("max_waves_per_simd", 0),
        ("lds_size_in_kb", 0),
        ("gds_size_in_kb", 0),
        ("num_gws", 0),
        ("wave_front_size", 0),
        ("array_count", 0),
        ("simd_arrays_per_engine", 0),
        ("cu_per_simd_array", 0),
        ("simd_per_cu", 0),
        ("max_slots_scratch_cu", 0),
        ("gfx_target_version", 0),
        ("vendor_id", 0),
        ("device_id", 0),
        ("location_id", 0),
        ("domain", 0),
        ("drm_render_minor", 0),
        ("hive_id", 0),
        ("num_sdma_engines", 0),
        ("num_sdma_xgmi_engines", 0),
        ("num_sdma_queues_per_engine", 0),
        ("num_cp_queues", 0),
        ("max_engine_clk_ccompute", 3700),
    ]


def _write(path: Path, pairs: list[tuple[str, int]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{key} {value}\n" for key, value in pairs), encoding="ascii")


def write_kfd_tree(
    root: Path,
    gpus: Sequence[FakeAmdGpu],
    *,
    cpu_sockets: int = 2,
    cpu_cores: int = 96,
    amdgpu_version: str | None = None,
    rocm_version: str | None = None,
) -> Path:
    """Create the tree under ``root`` and return ``root``."""
    nodes = root / "sys/class/kfd/kfd/topology/nodes"
    for socket in range(cpu_sockets):
        _write(nodes / str(socket) / "properties", _cpu_properties(cpu_cores, socket))
        _write(
            nodes / str(socket) / "mem_banks/0/properties",
            [("heap_type", 0), ("size_in_bytes", 1584 * 2**30 // cpu_sockets), ("flags", 0)],
        )
    for slot, gpu in enumerate(gpus):
        node = nodes / str(cpu_sockets + slot)
        props = _gpu_properties(gpu, slot)
        _write(node / "properties", props)
        _write(
            node / "mem_banks/0/properties",
            [("heap_type", 1), ("size_in_bytes", gpu.vram_bytes), ("flags", 0), ("width", 8192)],
        )
        bus = dict(props)["location_id"] >> 8
        pci = root / f"sys/bus/pci/devices/0000:{bus:02x}:00.0"
        pci.mkdir(parents=True, exist_ok=True)
        (pci / "vendor").write_text("0x1002\n")
        (pci / "device").write_text(f"0x{gpu.device_id:04x}\n")
        (pci / "revision").write_text(f"0x{gpu.revision:02x}\n")
        (pci / "class").write_text("0x120000\n" if gpu.wave_front_size == 64 else "0x030000\n")
    (root / "dev").mkdir(exist_ok=True)
    (root / "dev/kfd").write_text("")
    if amdgpu_version is not None:
        (root / "sys/module/amdgpu").mkdir(parents=True, exist_ok=True)
        (root / "sys/module/amdgpu/version").write_text(amdgpu_version + "\n")
    if rocm_version is not None:
        (root / "opt/rocm/.info").mkdir(parents=True, exist_ok=True)
        (root / "opt/rocm/.info/version").write_text(rocm_version + "\n")
    return root
