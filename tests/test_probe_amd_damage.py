"""A damaged AMD source costs only itself: a KFD topology node whose files are garbage, too big,
not regular files or missing keys, a memory bank, a ROCm version file, an amdsmi device. The
other GPUs are reported, and one probe error names what is wrong; the bounds on what is read
(MAX_SYSFS_FILE_BYTES, MAX_PROBED_DEVICES) hold at the limit and one past it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from kernelpolicy.limits import MAX_PROBED_DEVICES, MAX_SYSFS_FILE_BYTES
from kernelpolicy.testing import FakeAmdSmi, FakeAmdSmiGpu, write_kfd_tree
from kernelpolicy.testing.machines import MI300X
from tests.probe_amd_helpers import NODES, amd_probe


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
