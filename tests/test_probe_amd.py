"""AMD detection from a fake KFD sysfs tree laid out as the amdgpu driver does, and from a fake
amdsmi where there is none: names, products, versions, the devices a process sees. What a
damaged tree costs: tests/test_probe_amd_damage.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kernelpolicy.platform.amd_ids import gfx_capability, gfx_name, parse_gfx_override
from kernelpolicy.testing import FakeAmdSmi, FakeAmdSmiGpu, write_kfd_tree
from kernelpolicy.testing.machines import MI250X_GCD, MI300X, MI355X, RX7900XTX
from tests.probe_amd_helpers import amd_probe


@pytest.mark.parametrize(
    ("target", "name", "capability"),
    [
        pytest.param(90402, "gfx942", "9.4", id="mi300x"),
        pytest.param(90500, "gfx950", "9.5", id="mi355x"),
        pytest.param(90010, "gfx90a", "9.0", id="mi250x-hex-stepping"),
        pytest.param(90008, "gfx908", "9.0", id="mi100"),
        pytest.param(110000, "gfx1100", "11.0", id="rdna3"),
        pytest.param(120001, "gfx1201", "12.0", id="rdna4"),
        pytest.param(120500, "gfx1250", "12.5", id="gfx1250"),
    ],
)
def test_gfx_names(target: int, name: str, capability: str) -> None:
    """Major in decimal, minor and stepping one hex digit each."""
    assert gfx_name(target) == name
    assert gfx_capability(target) == capability


@pytest.mark.parametrize(
    "target",
    [
        pytest.param(0, id="zero"),
        pytest.param(91600, id="minor-16"),
        pytest.param(-1, id="negative"),
    ],
)
def test_gfx_names_out_of_range(target: int) -> None:
    """Parts that do not fit one hex digit are an error, not a made-up name."""
    with pytest.raises(ValueError, match="gfx_target_version"):
        gfx_name(target)


def test_mi300x_host(empty_root: Path) -> None:
    """CPU nodes are skipped; GPU nodes give arch, CUs, VRAM, product, driver and ROCm."""
    write_kfd_tree(empty_root, [MI300X] * 8, amdgpu_version="6.10.5", rocm_version="6.3.1-48")
    platform = amd_probe(empty_root)
    assert platform.vendor == "amd"
    assert len(platform.devices) == 8
    dev = platform.devices[0]
    assert (dev.name, dev.arch, dev.capability) == ("AMD Instinct MI300X", "gfx942", "9.4")
    assert (dev.pci_device_id, dev.compute_units, dev.memory_mib) == ("0x74a1", 304, 196608)
    assert (platform.driver.version, platform.driver.rocm) == ("6.10.5", "6.3.1-48")
    assert platform.probe_errors == ()


@pytest.mark.parametrize(
    ("gpu", "name", "arch", "cus"),
    [
        pytest.param(MI250X_GCD, "AMD Instinct MI250X / MI250", "gfx90a", 110, id="mi250x-gcd"),
        pytest.param(MI355X, "AMD Instinct MI355X", "gfx950", 256, id="mi355x"),
        pytest.param(
            RX7900XTX, "AMD Radeon RX 7900 XTX", "gfx1100", 96, id="rx7900xtx-by-revision"
        ),
    ],
)
def test_products(gpu, name: str, arch: str, cus: int, empty_root: Path) -> None:  # type: ignore[no-untyped-def]
    """Product names come from the PCI id (and revision where the id is shared)."""
    write_kfd_tree(empty_root, [gpu])
    dev = amd_probe(empty_root).devices[0]
    assert (dev.name, dev.arch, dev.compute_units) == (name, arch, cus)


def test_unknown_device_id_still_named(empty_root: Path) -> None:
    """An id missing from the table gets a generic name with id and arch."""
    write_kfd_tree(empty_root, [replace(MI300X, device_id=0x7FFF)])
    assert amd_probe(empty_root).devices[0].name == "AMD GPU 0x7fff (gfx942)"


def test_in_tree_driver_has_no_version_file(empty_root: Path) -> None:
    """Without /sys/module/amdgpu/version (in-tree driver) the version is unknown, not an error."""
    write_kfd_tree(empty_root, [MI300X])
    platform = amd_probe(empty_root)
    assert platform.driver.version is None
    assert platform.probe_errors == ()


def test_rocm_version_from_header_under_rocm_path(empty_root: Path) -> None:
    """ROCM_PATH is honoured, and rocm_version.h is read when .info/version is absent."""
    write_kfd_tree(empty_root, [MI300X])
    header = empty_root / "opt/rocm-7.0.2/include/rocm-core/rocm_version.h"
    header.parent.mkdir(parents=True)
    header.write_text(
        "#define ROCM_VERSION_MAJOR   7\n"
        "#define ROCM_VERSION_MINOR   0\n"
        "#define ROCM_VERSION_PATCH   2\n"
    )
    assert amd_probe(empty_root, ROCM_PATH="/opt/rocm-7.0.2").driver.rocm == "7.0.2"


@pytest.mark.parametrize(
    ("env", "physical", "error"),
    [
        pytest.param({"HIP_VISIBLE_DEVICES": "3,1"}, [3, 1], None, id="hip"),
        pytest.param({"CUDA_VISIBLE_DEVICES": "2"}, [2], None, id="cuda-var-honoured-by-hip"),
        pytest.param(
            {"HIP_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "2"}, [0], None, id="hip-wins"
        ),
        pytest.param(
            {"ROCR_VISIBLE_DEVICES": "1,2,3", "HIP_VISIBLE_DEVICES": "2"},
            [3],
            None,
            id="rocr-then-hip",
        ),
        pytest.param({"ROCR_VISIBLE_DEVICES": "GPU-5a2b000000003333"}, [2], None, id="rocr-uuid"),
        pytest.param(
            {"HIP_VISIBLE_DEVICES": "0,4"}, [0], "entry '4' names no device", id="bad-index"
        ),
        pytest.param(
            {"HIP_VISIBLE_DEVICES": "1,\u00b2"}, [1], "names no device", id="superscript-two"
        ),
    ],
)
def test_visibility(
    env: dict[str, str], physical: list[int], error: str | None, empty_root: Path
) -> None:
    """ROCR_VISIBLE_DEVICES, then HIP_VISIBLE_DEVICES (or CUDA_VISIBLE_DEVICES) select GPUs."""
    write_kfd_tree(empty_root, [MI300X] * 4)
    platform = amd_probe(empty_root, **env)
    assert [d.physical_index for d in platform.devices] == physical  # type: ignore[attr-defined]
    assert bool(platform.probe_errors) == (error is not None)
    if error:
        assert error in platform.probe_errors[0]


def test_hsa_override_recorded(empty_root: Path) -> None:
    """HSA_OVERRIDE_GFX_VERSION gives each device its effective arch."""
    write_kfd_tree(empty_root, [RX7900XTX])
    platform = amd_probe(empty_root, HSA_OVERRIDE_GFX_VERSION="11.0.0")
    assert "HSA_OVERRIDE_GFX_VERSION" not in platform.env  # effective_arch records it
    assert platform.devices[0].effective_arch == "gfx1100"  # type: ignore[attr-defined]
    assert parse_gfx_override("9.4.2") == "gfx942"


@pytest.mark.parametrize(
    "override",
    [
        pytest.param("gfx1100", id="a-name"),
        pytest.param("1\u00b2.0.0", id="superscript-two"),
        pytest.param("11.0." + "1" * 5000, id="5000-digits"),
    ],
)
def test_bad_hsa_override_reported(override: str, empty_root: Path) -> None:
    """An override that is not major.minor.stepping (in ASCII digits: '\u00b2'.isdigit() holds,
    and int() refused it with a ValueError) is reported, the device kept."""
    write_kfd_tree(empty_root, [RX7900XTX])
    platform = amd_probe(empty_root, HSA_OVERRIDE_GFX_VERSION=override)
    assert "expected major.minor.stepping" in platform.probe_errors[0]
    assert len(platform.devices) == 1
    assert parse_gfx_override(override) is None


def test_amdsmi_fallback_repairs_truncated_gfx90a(empty_root: Path) -> None:
    """Without a KFD tree amdsmi is used; its truncated 'gfx90' is repaired from the PCI id."""
    smi = FakeAmdSmi([FakeAmdSmiGpu(0x740C, "gfx90", 110, 65520, "AMD Instinct MI250X / MI250")])
    platform = amd_probe(empty_root, amdsmi=smi)
    dev = platform.devices[0]
    assert (dev.arch, dev.capability, dev.compute_units, dev.memory_mib) == (
        "gfx90a",
        "9.0",
        110,
        65520,
    )
    assert platform.driver.version == "6.10.5"
    assert not smi.initialised


def test_amdsmi_unknown_truncated_target_is_reported(empty_root: Path) -> None:
    """An unknown id with a truncated target cannot be repaired and says so."""
    smi = FakeAmdSmi([FakeAmdSmiGpu(0x7FFF, "gfx90", 100, 1000, "N/A")])
    platform = amd_probe(empty_root, amdsmi=smi)
    assert any("may be truncated" in e for e in platform.probe_errors)


def test_amdsmi_init_failure(empty_root: Path) -> None:
    """amdsmi failing to start is a probe error; the platform is 'none'."""
    platform = amd_probe(empty_root, amdsmi=FakeAmdSmi(fail_init=True))
    assert platform.vendor == "none"
    assert "amdsmi: cannot initialise" in platform.probe_errors[0]
