"""Messages the documentation shows that no transcript can re-run (another user's daemon, a
broken GPU, a bad snapshot): each line of such a block is made here by the real code and
compared with the page (issue 28: documentation that shows output is checked by a test).

docs/engines.md's two such lines are checked by tests/test_engine_knobs_proof.py."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from kernelpolicy import PlatformFileError, load_platform, probe
from kernelpolicy.cli import main
from kernelpolicy.server import sockets
from kernelpolicy.testing import FakeAmdSmi, FakeAmdSmiGpu, FakeNVML, write_kfd_tree
from kernelpolicy.testing.machines import H100_SXM, MI300X
from tests.helpers import ROOT, fixture

_BLOCK = re.compile(r"^```text\n(.*?)^```$", re.S | re.M)


def block(page: str, first: str) -> list[str]:
    """The lines of the one ```text block of ``docs/<page>`` that starts with ``first``."""
    text = (ROOT / "docs" / page).read_text()
    (found,) = [b for b in _BLOCK.findall(text) if b.startswith(first)]
    return str(found).splitlines()


# -- docs/daemon-security.md: a daemon run by another user is refused -------------------------


def test_status_refusing_another_users_daemon(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The page's example, as uid 1000 with uid 65534 behind the socket: exit 2, its line."""
    monkeypatch.setattr(sockets, "peer_uid", lambda path: 65534)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert main(["status", "--address", "unix:/tmp/shared/kp.sock"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == block("daemon-security.md", "kernelpolicy: error: no daemon")


# -- docs/probe-and-inputs.md: a snapshot refused by key --------------------------------------


def test_snapshot_problems_named_by_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A negative memory size and a 4301-character driver version, as the page lists them."""
    snapshot = fixture("h100-sxm").to_dict()
    snapshot["devices"][0]["memory_mib"] = -1
    snapshot["driver"]["version"] = "1" * 4301
    (tmp_path / "node.json").write_text(json.dumps(snapshot))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PlatformFileError) as info:
        load_platform("node.json")
    assert str(info.value).splitlines() == block("probe-and-inputs.md", "node.json: not a valid")


# -- docs/probe-and-inputs.md: one probe_errors entry per cause -------------------------------

NODES = "sys/class/kfd/kfd/topology/nodes"


def _probe_errors_block() -> list[str]:
    return block("probe-and-inputs.md", "nvml: device 2: name:")


def _errors(
    root: Path, nvml: FakeNVML | None = None, amdsmi: FakeAmdSmi | None = None
) -> list[str]:
    """The probe's entries on a host of ``root``, paths given from the fake root."""
    found = probe(root=root, nvml=nvml, amdsmi=amdsmi, environ={}, metadata=lambda name: None)
    return [e.replace(str(root), "") for e in found.probe_errors]


# (the block's line, GPUs, NVML faults, NVML values): one GPU's or one system query's fault.
NVML_FAULTS = [
    pytest.param(0, 4, {"nvmlDeviceGetName": {2: OSError(5, "Input/output error")}}, {},
                 id="name-oserror"),
    pytest.param(1, 2, {}, {"nvmlDeviceGetMemoryInfo": {1: SimpleNamespace(total=-5 * 2**20)}},
                 id="negative-memory"),
    pytest.param(2, 4, {}, {"nvmlDeviceGetCudaComputeCapability": {3: (None, 0)}},
                 id="capability-none"),
    pytest.param(3, 2, {"nvmlDeviceGetMemoryInfo": {1: pynvml.NVML_ERROR_GPU_IS_LOST}}, {},
                 id="memory-gpu-lost"),
    pytest.param(5, 2, {"nvmlSystemGetDriverVersion": OSError("gone")}, {},
                 id="driver-version-oserror"),
]  # fmt: skip


@pytest.mark.parametrize(("line", "gpus", "faults", "values"), NVML_FAULTS)
def test_nvml_fault_entry(
    empty_root: Path, line: int, gpus: int, faults: dict[str, Any], values: dict[str, Any]
) -> None:
    """The fault makes one probe_errors entry: the page's line."""
    nvml = FakeNVML([H100_SXM.with_slot(i) for i in range(gpus)], faults=faults, values=values)
    assert _errors(empty_root, nvml=nvml) == [_probe_errors_block()[line]]


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _malformed(path: Path) -> None:
    path.write_text(path.read_text().replace("simd_count 1216", "simd_count lots"))


# (the block's line, MI300X GPUs, the file under the fake root, what is done to it)
SYSFS_FAULTS = [
    pytest.param(6, 2, f"{NODES}/3/properties", lambda p: p.write_bytes(b""), id="empty"),
    pytest.param(7, 2, f"{NODES}/3/properties", _malformed, id="malformed-line"),
    pytest.param(8, 3, f"{NODES}/4/properties", _fifo, id="fifo"),
    pytest.param(9, 2, f"{NODES}/2/mem_banks/0/properties", lambda p: p.write_bytes(b""),
                 id="empty-memory-bank"),
    pytest.param(11, 2, "opt/rocm/.info/version", lambda p: p.write_bytes(b"6." + b"1" * 400),
                 id="rocm-version-too-long"),
]  # fmt: skip


@pytest.mark.parametrize(("line", "gpus", "file", "damage"), SYSFS_FAULTS)
def test_sysfs_fault_entry(
    empty_root: Path, line: int, gpus: int, file: str, damage: Callable[[Path], object]
) -> None:
    """The damaged file makes one probe_errors entry: the page's line."""
    write_kfd_tree(empty_root, [MI300X] * gpus, rocm_version="6.3.1")
    damage(empty_root / file)
    assert _errors(empty_root) == [_probe_errors_block()[line]]


class _CountsAMillion(FakeNVML):
    def nvmlDeviceGetCount(self) -> int:
        return 1_000_000


class _FellOff(FakeAmdSmi):
    def amdsmi_get_gpu_asic_info(self, handle: Any) -> Any:
        if handle == self.amdsmi_get_processor_handles()[0]:
            raise OSError("device fell off the bus")
        return super().amdsmi_get_gpu_asic_info(handle)


_MI300X_SMI = FakeAmdSmiGpu(0x74A1, "gfx942", 304, 196608, "AMD Instinct MI300X")
# (the block's line, the fake library that misbehaves)
LIBRARY_FAULTS = [
    pytest.param(4, {"nvml": _CountsAMillion([H100_SXM])}, id="nvml-device-count"),
    pytest.param(10, {"amdsmi": _FellOff([_MI300X_SMI, _MI300X_SMI])}, id="amdsmi-device"),
]


@pytest.mark.parametrize(("line", "library"), LIBRARY_FAULTS)
def test_library_fault_entry(empty_root: Path, line: int, library: dict[str, Any]) -> None:
    """The library's answer makes one probe_errors entry: the page's line."""
    assert _errors(empty_root, **library) == [_probe_errors_block()[line]]


def test_every_probe_error_line_is_made() -> None:
    """Each line of the page's block is one case above, and there are no more cases."""
    lines = [int(str(p.values[0])) for p in [*NVML_FAULTS, *SYSFS_FAULTS, *LIBRARY_FAULTS]]
    assert sorted(lines) == list(range(len(_probe_errors_block())))
