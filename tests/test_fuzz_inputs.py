"""Fuzz the probe's and the inputs' surfaces: only the error tree comes out, nothing else.

Surfaces: platform files (random bytes, random JSON values, snapshot-shaped objects with random
values), settings and environment mappings, the one boolean parser, the env capture, version
strings and specifiers, and the hardware the probe reads (random per-device NVML faults and
garbage values, random garbage in KFD properties files). Example counts come from the
hypothesis profile in conftest.py (``ci`` by default; ``HYPOTHESIS_PROFILE=release`` for the
long run before a release).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest
from hypothesis import given
from hypothesis import strategies as st

import kernelpolicy
from kernelpolicy import probe
from kernelpolicy.engine.decide import resolve_policies
from kernelpolicy.errors import PlatformFileError, SettingsError, VersionError
from kernelpolicy.limits import MAX_ENV_VALUE_CHARS, SHOWN_ENV_VALUE_CHARS, shown
from kernelpolicy.platform.envvars import capture_env, carried
from kernelpolicy.platform.fixtures import fixture_dir
from kernelpolicy.platform.model import Platform, load_platform
from kernelpolicy.settings import parse_bool, settings_from
from kernelpolicy.testing import FakeNVML, write_kfd_tree
from kernelpolicy.testing.machines import H100_SXM, MI300X
from kernelpolicy.versions import StackVersion, UnreadableVersion, parse_specifier, parse_version

# JSON values of any shape: what a platform file or a settings value can hold.
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=25,
)

# Snapshot-shaped objects: the contract's keys, each holding a random value of a random type.
DEVICE = st.fixed_dictionaries(
    {},
    optional={
        key: JSON | st.text(max_size=12) | st.integers(min_value=-2, max_value=300)
        for key in ("index", "name", "arch", "capability", "pci_device_id", "memory_mib",
                    "compute_units")
    },
)  # fmt: skip
SNAPSHOT = st.fixed_dictionaries(
    {"schema": st.sampled_from(["kernelpolicy.platform/v1", "v0"]) | JSON},
    optional={
        "vendor": st.sampled_from(["nvidia", "amd", "none", "intel"]) | JSON,
        "devices": st.lists(DEVICE, max_size=3) | JSON,
        "driver": st.dictionaries(st.sampled_from(["version", "cuda", "rocm"]), JSON) | JSON,
        "torch": st.dictionaries(st.sampled_from(["version", "cuda", "hip"]), JSON) | JSON,
        "libraries": st.dictionaries(st.text(max_size=8), JSON | st.text(max_size=300)) | JSON,
        "env": st.dictionaries(st.text(max_size=8), JSON | st.text(max_size=100)) | JSON,
        "probe_errors": st.lists(JSON, max_size=3) | JSON,
    },
)

SETTINGS = [
    "KERNELPOLICY_POLICY_PATHS", "KERNELPOLICY_OVERRIDES", "KERNELPOLICY_LOG_FORMAT",
    "KERNELPOLICY_CACHE_DIR", "KERNELPOLICY_TLS_CERT_FILE", "KERNELPOLICY_TLS_KEY_FILE",
    "KERNELPOLICY_TLS_CLIENT_CA_FILE", "KERNELPOLICY_ALLOW_UNTRUSTED_FILES",
]  # fmt: skip
# A setting's value: random text, brackets that nest deep, or JSON text of a random value.
SETTING_VALUE = (
    st.text(max_size=60)
    | st.integers(min_value=1, max_value=3000).map(lambda n: "[" * n)
    | st.integers(min_value=1, max_value=3000).map(lambda n: '{"a":' * n)
    | JSON.map(json.dumps)
)


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    """One directory per module: hypothesis runs every example in the same test call."""
    with tempfile.TemporaryDirectory() as tmp:
        yield Path(tmp)


@given(data=st.binary(max_size=300) | JSON.map(lambda v: json.dumps(v).encode()))
def test_platform_file_bytes(data: bytes, scratch: Path) -> None:
    """Any bytes in a platform file: a Platform or one PlatformFileError naming the file."""
    path = scratch / "p.json"
    path.write_bytes(data)
    error = _error_of(lambda: load_platform(path), PlatformFileError)
    assert error is None or error.startswith(str(path))


def _error_of(work: Callable[[], object], kind: type[Exception]) -> str | None:
    """The message of the ``kind`` error ``work`` raises, or None; anything else propagates."""
    try:
        work()
    except kind as exc:
        return str(exc)
    return None


@given(SNAPSHOT | JSON)
def test_platform_values(data: Any) -> None:
    """Any JSON value, snapshot-shaped or not: a Platform or one PlatformFileError, and a
    Platform that loads always writes a snapshot that loads again to the same thing."""
    try:
        platform = Platform.from_dict(data)
    except PlatformFileError:
        return
    assert Platform.from_dict(json.loads(platform.to_json())) == platform


@given(st.dictionaries(st.sampled_from(SETTINGS), SETTING_VALUE, max_size=4))
def test_settings_from_any_values(env: dict[str, str]) -> None:
    """Any KERNELPOLICY_* values: Settings, or one SettingsError naming a variable."""
    error = _error_of(lambda: settings_from(env), SettingsError)
    if error is not None:
        assert any(name in error for name in env)
        assert len(error) < 2000


@given(st.text(max_size=200) | st.text(min_size=SHOWN_ENV_VALUE_CHARS, max_size=5000))
def test_parse_bool_any_text(value: str) -> None:
    """Any text: a boolean, or a SettingsError naming the variable that shows a cut value."""
    error = _error_of(lambda: parse_bool("VLLM_USE_FLASHINFER_SAMPLER", value), SettingsError)
    if error is not None:
        assert error.startswith("VLLM_USE_FLASHINFER_SAMPLER=")
        assert len(error) < 4 * SHOWN_ENV_VALUE_CHARS + 200


@given(
    st.dictionaries(
        st.text(max_size=12) | st.sampled_from(["VLLM_USE_FLASHINFER_SAMPLER", "KERNELPOLICY_X"]),
        st.text(max_size=100) | st.integers(0, MAX_ENV_VALUE_CHARS + 50).map(lambda n: "v" * n),
        max_size=6,
    )
)
def test_env_capture_any_values(environ: dict[str, str]) -> None:
    """The capture keeps only matching names, each value in a short, stable carried form."""
    captured = capture_env(environ, ["VLLM_*", "KERNELPOLICY_*"])
    assert set(captured) <= {k for k in environ if k.startswith(("VLLM_", "KERNELPOLICY_"))}
    for value in captured.values():
        assert len(value) <= SHOWN_ENV_VALUE_CHARS + len("...(cut, 99999 chars)")
        assert carried(value) == value
        assert shown(value) == value


@given(
    st.text(max_size=80)
    | st.from_regex(r"v?[0-9]{1,300}(\.[0-9]{1,9}){0,3}([-+~][a-z0-9.]{0,9})?", fullmatch=True)
)
def test_parse_version_never_raises(raw: str) -> None:
    """Any text: a StackVersion or an UnreadableVersion that says why, never an exception."""
    parsed = parse_version(raw)
    assert isinstance(parsed, StackVersion | UnreadableVersion)
    if isinstance(parsed, UnreadableVersion):
        assert parsed.reason
        assert len(str(parsed)) < 400


@given(
    st.text(max_size=60)
    | st.from_regex(r"(==|>=|<|~=|!=)[0-9]{1,300}(\.[0-9]{1,9})?", fullmatch=True)
)
def test_parse_specifier_only_version_errors(text: str) -> None:
    """Any specifier text: a SpecifierSet that matches without overflowing, or VersionError."""
    try:
        specifiers = parse_specifier(text)
    except VersionError:
        return
    specifiers.contains("1.0", prereleases=True)


# Per-device NVML faults: an NVML error, any exception, or a garbage value from the driver.
NVML_FUNCTIONS = [
    "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetUUID", "nvmlDeviceGetName",
    "nvmlDeviceGetCudaComputeCapability", "nvmlDeviceGetPciInfo", "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetAttributes", "nvmlDeviceGetNumGpuCores",
]  # fmt: skip
RAISED = st.sampled_from(
    [
        pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_UNKNOWN, pynvml.NVML_ERROR_NOT_SUPPORTED,
        OSError(5, "Input/output error"), RuntimeError("binding bug"), ValueError("x"),
        MemoryError(), ZeroDivisionError(), UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"),
    ]
)  # fmt: skip
GARBAGE = st.one_of(
    st.none(), st.integers(), st.text(max_size=5), st.binary(max_size=5),
    st.tuples(st.integers(-5, 200), st.integers(-5, 200)),
    st.builds(SimpleNamespace, total=st.integers(-(2**40), 2**50)),
    st.builds(SimpleNamespace, pciDeviceId=st.integers(-5, 2**33), busId=st.binary(max_size=8)),
    st.builds(SimpleNamespace, multiprocessorCount=st.integers(-5, 500)),
)  # fmt: skip
FAULT = st.tuples(st.sampled_from(NVML_FUNCTIONS), st.booleans(), RAISED, GARBAGE)


@given(st.dictionaries(st.integers(0, 3), FAULT, max_size=4))
def test_nvml_faults_cost_only_their_devices(faults: dict[int, tuple[Any, ...]]) -> None:
    """Random faults on random devices of four: the probe returns, the vendor stays nvidia, and
    every device without a fault is reported."""
    raising: dict[str, dict[int, Any]] = {}
    values: dict[str, dict[int, Any]] = {}
    for device, (function, raises, error, garbage) in faults.items():
        if raises:
            raising.setdefault(function, {})[device] = error
        else:
            values.setdefault(function, {})[device] = garbage
    nvml = FakeNVML([H100_SXM.with_slot(i) for i in range(4)], faults=raising, values=values)
    with tempfile.TemporaryDirectory() as root:
        platform = probe(root=root, nvml=nvml, amdsmi=None, environ={}, metadata=lambda n: None)
    assert platform.vendor == "nvidia"
    found = {d.physical_index for d in platform.devices}  # type: ignore[attr-defined]
    assert set(range(4)) - set(faults) <= found
    assert len(platform.probe_errors) >= len(set(range(4)) - found)
    assert nvml.refcount == 0


NODES = "sys/class/kfd/kfd/topology/nodes"
# Garbage for a properties file: random bytes, or the real file with lines dropped or mangled.
PROPERTIES = st.binary(max_size=300) | st.lists(
    st.sampled_from(["", "cpu_cores_count 0", "gfx_target_version 90402", "x", "simd_count -1",
                     "gfx_target_version 99999999", "device_id 18446744073709551616",
                     "simd_per_cu 0", "unique_id -7", "\xff"]),
    max_size=8,
).map(lambda lines: "\n".join(lines).encode("utf-8", "surrogateescape"))  # fmt: skip


@pytest.fixture(scope="module")
def kfd_tree(scratch: Path) -> tuple[Path, list[bytes]]:
    """Four MI300X nodes, written once; each example rewrites their properties files."""
    root = write_kfd_tree(scratch / "kfd", [MI300X] * 4)
    return root, [(root / NODES / str(2 + gpu) / "properties").read_bytes() for gpu in range(4)]


@given(garbage=st.dictionaries(st.integers(0, 3), PROPERTIES, max_size=4))
def test_kfd_garbage_costs_only_its_nodes(
    garbage: dict[int, bytes], kfd_tree: tuple[Path, list[bytes]]
) -> None:
    """Random garbage in the properties of random GPU nodes of four: the probe returns and
    every untouched GPU is reported; a missing one has an error naming its node."""
    root, originals = kfd_tree
    for gpu in range(4):
        (root / NODES / str(2 + gpu) / "properties").write_bytes(garbage.get(gpu, originals[gpu]))
    platform = probe(root=root, nvml=None, amdsmi=None, environ={}, metadata=lambda n: None)
    found = {d.kfd_node - 2 for d in platform.devices}  # type: ignore[attr-defined]
    assert set(range(4)) - set(garbage) <= found
    for gpu in set(garbage) - found:
        reported = any(e.startswith(f"kfd: node {2 + gpu}: ") for e in platform.probe_errors)
        assert reported or _not_a_gpu(garbage[gpu])


def _not_a_gpu(data: bytes) -> bool:
    """Whether a properties file is well formed and describes a CPU (or no) agent: the one case
    in which the probe skips a node without an error."""
    try:
        pairs = [line.split() for line in data.decode("ascii").splitlines() if line.strip()]
        props = {key: int(value) for key, value in pairs}
    except ValueError:
        return False
    return (
        bool(props)
        and (props.get("cpu_cores_count", 0) != 0 or props.get("gfx_target_version", 0) <= 0)
        and "cpu_cores_count" in props
        and "gfx_target_version" in props
    )


SWITCHES = ["VLLM_USE_FLASHINFER_SAMPLER", "VLLM_ROCM_USE_AITER", "KERNELPOLICY_FORCE_MHC"]
ENV_VALUE = (
    st.text(max_size=12)
    | st.sampled_from(["1", "0", " on ", "torch", "aiter"])
    | st.integers(0, MAX_ENV_VALUE_CHARS + 20).map(lambda n: "v" * n)
)


@pytest.fixture(scope="module")
def h100() -> Platform:
    return load_platform(fixture_dir() / "platforms/h100-sxm.json")


@given(env=st.dictionaries(st.sampled_from(SWITCHES), ENV_VALUE, max_size=3))
def test_resolve_any_switch_values(env: dict[str, str], h100: Platform) -> None:
    """Any values of the switches and forces: a Resolution (errors are decisions) whose
    carried inputs rebuild the same answer, and no value is shown longer than its cut form."""
    given = {**env, "KERNELPOLICY_LOG_FORMAT": "off"}
    refused = _error_of(lambda: kernelpolicy.resolve(h100, given), SettingsError)
    if refused is not None:  # a force naming no implementation of its feature, refused first
        assert refused.startswith("KERNELPOLICY_FORCE_MHC"), refused
        assert "expected one of aiter, torch" in refused, refused
        return
    resolution = kernelpolicy.resolve(h100, given)
    assert set(resolution.env) == set(env)  # every one is read by the bundled policies
    for value in resolution.env.values():
        assert len(value) <= SHOWN_ENV_VALUE_CHARS + len("...(cut, 99999 chars)")
    again = resolve_policies(h100, resolution.env, resolution.policies, resolution.overrides)
    assert again.fingerprint == resolution.fingerprint
    assert again.to_dict() == resolution.to_dict()
