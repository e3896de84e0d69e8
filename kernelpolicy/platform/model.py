"""The Platform snapshot: what a probe found, as frozen, validated values.

The JSON form is the contract ``kernelpolicy.platform/v1`` (see DESIGN.md): required keys are
fixed, extra keys are allowed and kept.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, BinaryIO, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kernelpolicy.errors import PlatformFileError
from kernelpolicy.limits import MAX_NESTING_DEPTH, MAX_PLATFORM_FILE_BYTES, MAX_VERSION_CHARS, shown
from kernelpolicy.platform.envvars import carried
from kernelpolicy.safeio import decode_utf8, parse_json, read_bytes_bounded, value_depth

SCHEMA = "kernelpolicy.platform/v1"
Vendor = Literal["nvidia", "amd", "none"]

__all__ = [
    "SCHEMA",
    "Capability",
    "Device",
    "DriverInfo",
    "Platform",
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


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True)


class Device(_Frozen):
    """One GPU as the worker sees it; ``index`` is the logical (visible) index."""

    index: int = Field(ge=0)
    name: str
    arch: str
    capability: str
    pci_device_id: str | None = None
    memory_mib: int | None = Field(default=None, ge=0)
    compute_units: int | None = Field(default=None, ge=0)

    @field_validator("capability")
    @classmethod
    def _capability_form(cls, value: str) -> str:
        Capability.parse(value)
        return value

    @property
    def capability_tuple(self) -> Capability:
        return Capability.parse(self.capability)


def bounded_version(value: str | None) -> str | None:
    """``value``, or ``ValueError`` when it is longer than ``MAX_VERSION_CHARS``."""
    if value is not None and len(value) > MAX_VERSION_CHARS:
        raise ValueError(
            f"a version of {len(value)} characters is over MAX_VERSION_CHARS ({MAX_VERSION_CHARS})"
        )
    return value


class DriverInfo(_Frozen):
    """The kernel driver and the CUDA or ROCm version it provides."""

    version: str | None = None
    cuda: str | None = None
    rocm: str | None = None

    @field_validator("version", "cuda", "rocm")
    @classmethod
    def _bounded(cls, value: str | None) -> str | None:
        return bounded_version(value)


class TorchBuild(_Frozen):
    """The installed torch and the accelerator runtime it was built for."""

    version: str | None = None
    cuda: str | None = None
    hip: str | None = None

    @field_validator("version", "cuda", "hip")
    @classmethod
    def _bounded(cls, value: str | None) -> str | None:
        return bounded_version(value)


class Platform(_Frozen):
    """Everything the policies may look at about one machine."""

    schema_id: Literal["kernelpolicy.platform/v1"] = Field(
        default="kernelpolicy.platform/v1", alias="schema"
    )
    vendor: Vendor
    devices: tuple[Device, ...] = ()
    driver: DriverInfo = DriverInfo()
    torch: TorchBuild = TorchBuild()
    libraries: dict[str, str] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    probe_errors: tuple[str, ...] = ()

    @field_validator("libraries")
    @classmethod
    def _library_versions(cls, value: dict[str, str]) -> dict[str, str]:
        for name, version in value.items():
            try:
                bounded_version(version)
            except ValueError as exc:
                raise ValueError(f"{shown(name)}: {exc}") from None
        return value

    @field_validator("env")
    @classmethod
    def _carried_env(cls, value: dict[str, str]) -> dict[str, str]:
        """Values in their carried form, whoever built the snapshot (see platform.envvars)."""
        return {name: carried(text) for name, text in value.items()}

    @property
    def primary(self) -> Device | None:
        """Device 0, the one a single-GPU worker runs on, or ``None`` without a GPU."""
        return self.devices[0] if self.devices else None

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready snapshot, keys as the contract names them."""
        return self.model_dump(mode="json", by_alias=True)

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
            return cls.model_validate(data)
        except ValidationError as exc:
            raise PlatformFileError(_describe(exc, source)) from None
        except (ValueError, TypeError, RecursionError, MemoryError) as exc:
            # Not expected from pydantic on JSON values; kept so that nothing else escapes.
            message = shown(str(exc) or type(exc).__name__, 200)
            raise PlatformFileError(f"{source}: not a valid {SCHEMA} snapshot: {message}") from None


def _describe(exc: ValidationError, source: str) -> str:
    lines = [f"{source}: not a valid {SCHEMA} snapshot ({_EXPECTED}):"]
    errors = exc.errors(include_url=False, include_input=False)
    for err in errors[:_MAX_LISTED]:
        where = ".".join(shown(str(part)) for part in err["loc"]) or "(top level)"
        lines.append(f"  {where}: {shown(err['msg'], 200)}")
    if len(errors) > _MAX_LISTED:
        lines.append(f"  ... and {len(errors) - _MAX_LISTED} more")
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
    data = read_bytes_bounded(
        path, limit=MAX_PLATFORM_FILE_BYTES, limit_name="MAX_PLATFORM_FILE_BYTES", fail=_fail
    )
    return load_platform_bytes(data, source)


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
