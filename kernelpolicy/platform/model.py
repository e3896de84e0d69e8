"""The Platform snapshot: what a probe found, as frozen, validated values.

The JSON form is the contract ``kernelpolicy.platform/v1`` (see DESIGN.md): required keys are
fixed, extra keys are allowed and kept.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal, NamedTuple

from kernelpolicy.errors import PlatformFileError
from kernelpolicy.limits import MAX_NESTING_DEPTH, MAX_PLATFORM_FILE_BYTES, MAX_VERSION_CHARS, shown
from kernelpolicy.platform.envvars import carried
from kernelpolicy.platform.identity import device_ids, is_app_specific_id, node_identity
from kernelpolicy.platform.values import (
    Check,
    Extra,
    PlatformValueError,
    got,
    init_fields,
    part,
    string_map,
    too_long,
)
from kernelpolicy.safeio import decode_utf8, parse_json, read_bytes_bounded, value_depth

SCHEMA = "kernelpolicy.platform/v1"
Vendor = Literal["nvidia", "amd", "none"]

__all__ = [
    "SCHEMA",
    "Capability",
    "Device",
    "DriverInfo",
    "Platform",
    "PlatformValueError",
    "TorchBuild",
    "Vendor",
    "load_platform",
    "load_platform_stream",
]

_CAPABILITY = re.compile(r"(\d{1,4})\.(\d{1,4})")
_EXPECTED = "expected the output of 'kernelpolicy probe --json'"
_MAX_LISTED = 20  # validation problems listed in one error; the rest are counted


class Capability(NamedTuple):
    """A compute capability (NVIDIA) or gfx major.minor (AMD) that orders itself."""

    major: int
    minor: int

    @classmethod
    def parse(cls, text: str) -> Capability:
        """Read ``"9.0"``; raise ``ValueError`` naming the expected form otherwise."""
        match = _CAPABILITY.fullmatch(text)
        if match is None:
            raise ValueError(f"capability must look like '9.0', got {shown(text)!r}")
        return cls(int(match.group(1)), int(match.group(2)))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


_DEVICE = {
    "index": ("count", True),
    "name": ("str", True),
    "arch": ("str", True),
    "capability": ("str", True),
    "pci_device_id": ("str?", False),
    "memory_mib": ("count?", False),
    "compute_units": ("count?", False),
}
_VERSION = ("version?", False)


@dataclass(frozen=True)
class Device(Extra):
    """One GPU as the worker sees it; ``index`` is the logical (visible) index."""

    index: int
    name: str
    arch: str
    capability: str
    pci_device_id: str | None = None
    memory_mib: int | None = None
    compute_units: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __init__(self, **values: Any) -> None:
        """Validate ``values`` (unknown keys are kept in ``extra``).

        Raises:
            PlatformValueError: Naming each bad key and what was expected.
        """
        init_fields(self, Device, values, _DEVICE, _check_device)

    @property
    def capability_tuple(self) -> Capability:
        return Capability.parse(self.capability)


def _check_device(check: Check, values: Mapping[str, Any]) -> None:
    capability = values.get("capability")
    if isinstance(capability, str):
        try:
            Capability.parse(capability)
        except ValueError as exc:
            check.fail("capability", str(exc))


def bounded_version(value: str | None) -> str | None:
    """``value``, or ``ValueError`` when it is longer than ``MAX_VERSION_CHARS``."""
    if value is not None and len(value) > MAX_VERSION_CHARS:
        raise ValueError(too_long(value))
    return value


@dataclass(frozen=True)
class DriverInfo(Extra):
    """The kernel driver and the CUDA or ROCm version it provides."""

    version: str | None = None
    cuda: str | None = None
    rocm: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __init__(self, **values: Any) -> None:
        """Validate ``values``. Raises: PlatformValueError."""
        init_fields(self, DriverInfo, values, dict.fromkeys(("version", "cuda", "rocm"), _VERSION))


@dataclass(frozen=True)
class TorchBuild(Extra):
    """The installed torch and the accelerator runtime it was built for."""

    version: str | None = None
    cuda: str | None = None
    hip: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __init__(self, **values: Any) -> None:
        """Validate ``values``. Raises: PlatformValueError."""
        init_fields(self, TorchBuild, values, dict.fromkeys(("version", "cuda", "hip"), _VERSION))


@dataclass(frozen=True)
class Platform(Extra):
    """Everything the policies may look at about one machine.

    A plain frozen value: building one validates it (:class:`PlatformValueError` names each
    bad key); :meth:`from_dict` is the boundary for untrusted snapshots.
    """

    vendor: Vendor
    devices: tuple[Device, ...] = ()
    driver: DriverInfo = field(default_factory=DriverInfo)
    torch: TorchBuild = field(default_factory=TorchBuild)
    libraries: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    probe_errors: tuple[str, ...] = ()
    machine_id: str | None = None
    schema_id: str = SCHEMA
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __init__(self, **values: Any) -> None:
        """Validate ``values`` (``schema`` is the contract's name for ``schema_id``).

        Raises:
            PlatformValueError: Naming each bad key and what was expected.
        """
        check = Check()
        data = dict(values)
        schema = data.pop("schema", data.pop("schema_id", SCHEMA))
        if schema != SCHEMA:
            check.fail("schema", f"expected {SCHEMA!r}, {got(schema)}")
        vendor = data.pop("vendor", None)
        if vendor not in _VENDORS:
            what = "required" if vendor is None else f"expected one of {_VENDOR_NAMES}"
            check.fail("vendor", what if vendor is None else f"{what}, {got(vendor)}")
        devices = data.pop("devices", ())
        if not isinstance(devices, (list, tuple)):
            check.fail("devices", f"expected a list of devices, {got(devices)}")
            devices = ()
        parts = tuple(part(check, f"devices.{i}", d, Device) for i, d in enumerate(devices))
        driver = part(check, "driver", data.pop("driver", {}), DriverInfo)
        torch = part(check, "torch", data.pop("torch", {}), TorchBuild)
        libraries = string_map(check, "libraries", data.pop("libraries", {}), bounded=True)
        env = string_map(check, "env", data.pop("env", {}), bounded=False)
        errors = data.pop("probe_errors", ())
        if not isinstance(errors, (list, tuple)) or not all(isinstance(e, str) for e in errors):
            check.fail("probe_errors", f"expected a list of strings, {got(errors)}")
            errors = ()
        machine_id = data.pop("machine_id", None)
        if machine_id is not None and not (
            isinstance(machine_id, str) and is_app_specific_id(machine_id)
        ):
            check.fail("machine_id", f"expected 32 lower-case hex characters, {got(machine_id)}")
        check.raise_any()
        set_ = object.__setattr__
        set_(self, "schema_id", SCHEMA)
        set_(self, "vendor", vendor)
        set_(self, "devices", parts)
        set_(self, "driver", driver)
        set_(self, "torch", torch)
        set_(self, "libraries", libraries)
        # values in their carried form, whoever built the snapshot (see platform.envvars)
        set_(self, "env", {name: carried(text) for name, text in env.items()})
        set_(self, "probe_errors", tuple(errors))
        set_(self, "machine_id", machine_id)
        set_(self, "extra", data)

    @property
    def primary(self) -> Device | None:
        """Device 0, the one a single-GPU worker runs on, or ``None`` without a GPU."""
        return self.devices[0] if self.devices else None

    @property
    def identity(self) -> str | None:
        """What the node's rollout cohorts are hashed from (see
        :mod:`kernelpolicy.platform.identity`), or ``None`` when the snapshot names neither a
        machine ID nor a GPU UUID."""
        return node_identity(self.machine_id, device_ids(d.extra for d in self.devices))

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready snapshot, keys as the contract names them."""
        return {
            "schema": SCHEMA,
            "vendor": self.vendor,
            "devices": [d.to_dict() for d in self.devices],
            "driver": self.driver.to_dict(),
            "torch": self.torch.to_dict(),
            "libraries": dict(self.libraries),
            "env": dict(self.env),
            "probe_errors": list(self.probe_errors),
            # Written only when known: snapshots without one stay as they were.
            **({"machine_id": self.machine_id} if self.machine_id is not None else {}),
            **self.extra,
        }

    def to_json(self, *, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<data>") -> Platform:
        """Validate a snapshot of any shape.

        Raises:
            PlatformFileError: Naming each bad key (the first few) and what was expected; this
                is the only exception, whatever ``data`` is.
        """
        depth = value_depth(data)
        if depth > MAX_NESTING_DEPTH:
            raise PlatformFileError(
                f"{source}: nested {depth} levels deep, over MAX_NESTING_DEPTH "
                f"({MAX_NESTING_DEPTH}); {_EXPECTED}"
            )
        try:
            if not isinstance(data, Mapping) or not all(isinstance(k, str) for k in data):
                raise PlatformValueError([("", f"expected a JSON object, {got(data)}")])
            return cls(**data)
        except PlatformValueError as exc:
            raise PlatformFileError(_describe(exc, source)) from None
        except (ValueError, TypeError, RecursionError, MemoryError) as exc:
            message = shown(str(exc) or type(exc).__name__, 200)
            raise PlatformFileError(f"{source}: not a valid {SCHEMA} snapshot: {message}") from None


_VENDORS = ("nvidia", "amd", "none")
_VENDOR_NAMES = ", ".join(map(repr, _VENDORS))


def _describe(exc: PlatformValueError, source: str) -> str:
    lines = [f"{source}: not a valid {SCHEMA} snapshot ({_EXPECTED}):"]
    for where, what in exc.problems[:_MAX_LISTED]:
        lines.append(f"  {shown(where, 200) or '(top level)'}: {shown(what, 200)}")
    if len(exc.problems) > _MAX_LISTED:
        lines.append(f"  ... and {len(exc.problems) - _MAX_LISTED} more")
    return "\n".join(lines)


def _fail(message: str) -> PlatformFileError:
    return PlatformFileError(message if "expected" in message else f"{message}; {_EXPECTED}")


def load_platform_bytes(data: bytes, source: str) -> Platform:
    """A snapshot from the bytes of a file or stream (see :func:`load_platform`)."""
    if len(data) > MAX_PLATFORM_FILE_BYTES:
        raise _fail(
            f"{source}: {len(data)} bytes is over MAX_PLATFORM_FILE_BYTES "
            f"({MAX_PLATFORM_FILE_BYTES} bytes)"
        )
    text = decode_utf8(data, source, _fail)
    return Platform.from_dict(parse_json(text, source, _fail), source=source)


def load_platform(path: str | Path) -> Platform:
    """Read a snapshot written by ``kernelpolicy probe --json``.

    Args:
        path: The JSON file: a regular file of at most ``MAX_PLATFORM_FILE_BYTES``, UTF-8, JSON
            nested at most ``MAX_NESTING_DEPTH`` deep, with no NaN or Infinity.

    Raises:
        PlatformFileError: The file is missing, not a regular file, too large, not UTF-8, not
            JSON, or does not match the schema; the message names the file and what was
            expected. Nothing else is raised, and a FIFO or device never blocks.
    """
    source = str(path)
    try:
        data = read_bytes_bounded(
            path, limit=MAX_PLATFORM_FILE_BYTES, limit_name="MAX_PLATFORM_FILE_BYTES", fail=_fail
        )
    except PlatformFileError:
        shipped = shipped_snapshot(path)
        if shipped is None:
            raise
        raise _fail(
            f"{source}: no such file; {_EXPECTED}, or a snapshot kernelpolicy ships: {shipped}"
        ) from None
    return load_platform_bytes(data, source)


SHIPPED = Path(__file__).resolve().parent.parent / "fixtures" / "platforms"
"""The snapshots that ship with kernelpolicy, installed (``fixtures.fixture_dir()``'s
``platforms``; that module imports this one)."""


def shipped_snapshot(path: str | Path) -> Path | None:
    """The shipped snapshot of the name of ``path`` where ``path`` does not exist (the README's
    ``kernelpolicy/fixtures/platforms/t4.json`` run outside a checkout), else None."""
    shipped = SHIPPED / Path(path).name
    if os.path.lexists(path) or not Path(path).name or not shipped.is_file():
        return None
    return shipped


def load_platform_stream(stream: BinaryIO | None = None, source: str = "<stdin>") -> Platform:
    """Read a snapshot from a binary stream (standard input by default), bounded like a file.

    Raises:
        PlatformFileError: As :func:`load_platform`.
    """
    reader = stream if stream is not None else sys.stdin.buffer
    try:
        data = reader.read(MAX_PLATFORM_FILE_BYTES + 1)
    except (OSError, ValueError) as exc:
        raise _fail(f"{source}: cannot read: {exc}") from None
    return load_platform_bytes(data, source)
