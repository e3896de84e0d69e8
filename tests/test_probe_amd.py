"""AMD detection from a fake KFD sysfs tree laid out as the amdgpu driver does."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from kernelpolicy import probe
from kernelpolicy.limits import MAX_PROBED_DEVICES, MAX_SYSFS_FILE_BYTES
from kernelpolicy.platform.amd_ids import gfx_capability, gfx_name, parse_gfx_override
from kernelpolicy.testing import FakeAmdSmi, FakeAmdSmiGpu, write_kfd_tree
from kernelpolicy.testing.machines import MI250X_GCD, MI300X, MI355X, RX7900XTX

NODES = "sys/class/kfd/kfd/topology/nodes"


def amd_probe(root: Path, amdsmi=None, **env: str):  # type: ignore[no-untyped-def]
    return probe(root=root, nvml=None, amdsmi=amdsmi, environ=env, metadata=lambda name: None)


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


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("\u00b2", id="superscript-two"),
        pytest.param("\u0663", id="arabic-indic-three"),
        pytest.param("1" * 200, id="200-digits"),
    ],
)
def test_a_topology_node_not_named_in_ascii_digits_is_no_node(name: str, empty_root: Path) -> None:
    """KFD names its nodes 0, 1, 2...; anything else in the directory is no node (a name
    '\u00b2' passed isdigit() and made sorting by int() raise)."""
    write_kfd_tree(empty_root, [MI300X])
    (empty_root / NODES / name).mkdir()
    platform = amd_probe(empty_root)
    assert len(platform.devices) == 1
    assert platform.probe_errors == ()


def test_malformed_properties_skip_that_node(empty_root: Path) -> None:
    """A properties line that is not '<key> <integer>' skips that node and names the line."""
    write_kfd_tree(empty_root, [MI300X, MI300X])
    props = empty_root / NODES / "3/properties"
    props.write_text(props.read_text().replace("simd_count 1216", "simd_count lots"))
    platform = amd_probe(empty_root)
    assert len(platform.devices) == 1
    (error,) = platform.probe_errors
    assert "nodes/3/properties:2: expected '<key> <integer>'" in error


def test_unreadable_properties_skip_that_node(empty_root: Path) -> None:
    """A properties file that cannot be read (here a directory) is reported, not raised."""
    write_kfd_tree(empty_root, [MI300X, MI300X])
    props = empty_root / NODES / "2/properties"
    props.unlink()
    props.mkdir()
    platform = amd_probe(empty_root)
    assert len(platform.devices) == 1
    assert "cannot read" in platform.probe_errors[0]


def test_non_ascii_properties(empty_root: Path) -> None:
    """Binary garbage in a properties file is reported."""
    write_kfd_tree(empty_root, [MI300X])
    (empty_root / NODES / "2/properties").write_bytes(b"\xff\xfe garbage")
    platform = amd_probe(empty_root)
    assert platform.devices == ()
    assert "cannot read" in platform.probe_errors[0]


def test_bad_gfx_target(empty_root: Path) -> None:
    """A gfx_target_version whose parts do not fit hex digits skips the node."""
    write_kfd_tree(empty_root, [MI300X])
    props = empty_root / NODES / "2/properties"
    props.write_text(
        props.read_text().replace("gfx_target_version 90402", "gfx_target_version 91700")
    )
    platform = amd_probe(empty_root)
    assert platform.devices == ()
    assert "must each fit one hex digit" in platform.probe_errors[0]


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


def _replace(old: str, new: str) -> Callable[[Path], None]:
    def damage(props: Path) -> None:
        props.write_text(props.read_text().replace(old, new))

    return damage


def _bytes(data: bytes) -> Callable[[Path], None]:
    return lambda props: props.write_bytes(data)


def _fifo(props: Path) -> None:
    props.unlink()
    os.mkfifo(props)


def _directory(props: Path) -> None:
    props.unlink()
    props.mkdir()


def _dev_zero(props: Path) -> None:
    props.unlink()
    props.symlink_to("/dev/zero")


# One bad GPU node among four (KFD node 3 = the second GPU): what is wrong, and the error.
BAD_NODE = [
    pytest.param(_bytes(b""), "properties: empty; expected '<key> <integer>' lines", id="empty"),
    pytest.param(_bytes(b"\n \n"), "empty", id="blank-lines"),
    pytest.param(_replace("simd_count 1216", "simd_count lots"), ":2: expected '<key> <integer>'",
                 id="malformed-line"),
    pytest.param(_bytes(b"\xff\xfe garbage"), "not ASCII (byte 0)", id="not-ascii"),
    pytest.param(_directory, "not a regular file (a directory)", id="directory"),
    pytest.param(_fifo, "not a regular file (a FIFO)", id="fifo-never-blocks"),
    pytest.param(_dev_zero, "not a regular file (a character device)", id="dev-zero"),
    pytest.param(_bytes(b"x 1\n" * (MAX_SYSFS_FILE_BYTES // 4 + 1)), "over MAX_SYSFS_FILE_BYTES",
                 id="size-limit-plus-one"),
    pytest.param(_replace("gfx_target_version 90402\n", ""), "no gfx_target_version",
                 id="missing-gfx-target"),
    pytest.param(_replace("cpu_cores_count 0\n", ""), "no cpu_cores_count", id="missing-cpu-cores"),
    pytest.param(_replace("gfx_target_version 90402", "gfx_target_version 91700"),
                 "must each fit one hex digit", id="impossible-gfx-target"),
    pytest.param(_replace("simd_count 1216", "simd_count -1216"),
                 "compute_units: expected an integer >= 0, got -304", id="negative-simds"),
]  # fmt: skip


@pytest.mark.parametrize(("damage", "message"), BAD_NODE)
def test_one_bad_node_costs_only_itself(
    damage: Callable[[Path], None], message: str, empty_root: Path
) -> None:
    """KFD node 3 is broken in some way: the other three GPUs are reported, vendor stays amd,
    and one probe error names node 3 and what is wrong with it."""
    write_kfd_tree(empty_root, [MI300X] * 4)
    damage(empty_root / NODES / "3/properties")
    platform = amd_probe(empty_root)
    assert platform.vendor == "amd"
    assert [d.kfd_node for d in platform.devices] == [2, 4, 5]  # type: ignore[attr-defined]
    assert len(platform.probe_errors) == 1
    assert platform.probe_errors[0].startswith("kfd: node 3: ")
    assert message in platform.probe_errors[0]
    assert platform.probe_errors[0].endswith("node skipped")


def test_sysfs_file_at_the_limit_is_read(empty_root: Path) -> None:
    """A properties file of exactly MAX_SYSFS_FILE_BYTES is read (padding lines are blank)."""
    write_kfd_tree(empty_root, [MI300X])
    props = empty_root / NODES / "2/properties"
    text = props.read_bytes()
    props.write_bytes(text + b"\n" * (MAX_SYSFS_FILE_BYTES - len(text)))
    platform = amd_probe(empty_root)
    assert len(platform.devices) == 1
    assert platform.probe_errors == ()


def test_bad_memory_bank_costs_only_the_memory_size(empty_root: Path) -> None:
    """A garbage mem_banks file leaves the GPU in, with its memory unknown and an error."""
    write_kfd_tree(empty_root, [MI300X, MI300X])
    (empty_root / NODES / "3/mem_banks/0/properties").write_bytes(b"")
    platform = amd_probe(empty_root)
    assert [d.memory_mib for d in platform.devices] == [196608, None]
    assert "mem_banks/0/properties: empty" in platform.probe_errors[0]
    assert platform.probe_errors[0].endswith("memory bank skipped")


@pytest.mark.parametrize(
    ("nodes", "read"),
    [
        pytest.param(MAX_PROBED_DEVICES, MAX_PROBED_DEVICES, id="at-limit"),
        pytest.param(MAX_PROBED_DEVICES + 1, MAX_PROBED_DEVICES, id="limit-plus-one"),
    ],
)
def test_topology_nodes_are_bounded(nodes: int, read: int, empty_root: Path) -> None:
    """At most MAX_PROBED_DEVICES KFD nodes are read; more is reported."""
    write_kfd_tree(empty_root, [MI300X] * (nodes - 1), cpu_sockets=1)
    platform = amd_probe(empty_root)
    assert len(platform.devices) == read - 1
    over = [e for e in platform.probe_errors if "MAX_PROBED_DEVICES" in e]
    assert len(over) == (nodes > MAX_PROBED_DEVICES)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(b"6." + b"1" * 400, "over MAX_VERSION_CHARS", id="rocm-version-too-long"),
        pytest.param(b"\xff", "not UTF-8", id="rocm-version-not-utf8"),
    ],
)
def test_bad_version_files_cost_only_the_version(
    content: bytes, message: str, empty_root: Path
) -> None:
    """A ROCm version file that is garbage leaves every GPU in and the version unknown."""
    write_kfd_tree(empty_root, [MI300X, MI300X], rocm_version="6.3.1")
    (empty_root / "opt/rocm/.info/version").write_bytes(content)
    platform = amd_probe(empty_root)
    assert len(platform.devices) == 2
    assert platform.driver.rocm is None
    assert any(message in e for e in platform.probe_errors)


class _BrokenSmi(FakeAmdSmi):
    """amdsmi whose asic info for the first handle raises, like a GPU that fell off the bus."""

    def amdsmi_get_gpu_asic_info(self, handle):  # type: ignore[no-untyped-def]
        if handle == self.amdsmi_get_processor_handles()[0]:
            raise OSError("device fell off the bus")
        return super().amdsmi_get_gpu_asic_info(handle)


def test_amdsmi_bad_device_costs_only_itself(empty_root: Path) -> None:
    """In the amdsmi fallback, too, one bad device costs only itself."""
    gpu = FakeAmdSmiGpu(0x74A1, "gfx942", 304, 196608, "AMD Instinct MI300X")
    platform = amd_probe(empty_root, amdsmi=_BrokenSmi([gpu, gpu]))
    assert platform.vendor == "amd"
    assert len(platform.devices) == 1
    assert platform.probe_errors == (
        "amdsmi: device 0: OSError: device fell off the bus; device skipped",
    )
