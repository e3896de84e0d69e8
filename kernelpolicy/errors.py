"""The one exception tree of kernelpolicy.

Every error kernelpolicy raises on purpose derives from :class:`KernelPolicyError`::

    KernelPolicyError
    ├── PlatformFileError      a platform snapshot file is missing, not JSON, or not the schema
    ├── VersionError           a version string could not be read (raised only on request)
    ├── SettingsError          an environment variable or setting has a value we cannot accept
    ├── PolicyError            policy files are invalid; ``.issues`` lists file, line, feature, key
    ├── UntrustedFileError     a policy file, directory or evidence store is owned or writable
    │                          by another user (see kernelpolicy.trust)
    ├── EvidenceError          stored or sent evidence (verify's results) is malformed or
    │                          cannot be written
    ├── ResolutionError        a decision is an error (a required kernel is unsupported, an
    │                          unknown feature or implementation was asked for)
    ├── DaemonError            the daemon cannot listen, or a client's request to it failed
    └── InventoryError         a fleet inventory (``kernelpolicy diff --platforms``) cannot be
                               read: too large, or neither snapshots nor Kubernetes Nodes

The probe itself never raises: what it cannot read is recorded in ``Platform.probe_errors``.
A resolution never raises either: errors are values in ``Decision.error`` until a caller asks
for an implementation that does not exist. User mistakes get messages that name the file, the
feature, the key and what was expected.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class KernelPolicyError(Exception):
    """Root of every error kernelpolicy raises on purpose."""


class PlatformFileError(KernelPolicyError):
    """A platform snapshot file could not be read or does not match ``kernelpolicy.platform/v1``."""


class VersionError(KernelPolicyError):
    """A version string could not be read as any version format the GPU stack uses."""


class SettingsError(KernelPolicyError):
    """An environment variable or setting holds a value kernelpolicy cannot accept."""


@dataclass(frozen=True)
class PolicyIssue:
    """One mistake in a policy file, located as precisely as the file allows."""

    file: str
    message: str
    line: int | None = None
    feature: str | None = None
    key: str | None = None
    severity: str = "error"

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        parts = [where]
        if self.feature:
            parts.append(f"[{self.feature}]")
        if self.key:
            parts.append(self.key)
        return f"{' '.join(parts)}: {self.message}"  # the place, a colon, what is wrong


class PolicyError(KernelPolicyError):
    """Policy files failed validation; nothing from them was loaded."""

    def __init__(self, issues: list[PolicyIssue]) -> None:
        self.issues = issues
        super().__init__("\n".join(str(issue) for issue in issues))


class UntrustedFileError(KernelPolicyError):
    """A file or directory the engine would trust is owned or writable by another user.

    Attributes:
        issues: One located issue per path refused, where the refusal names several (what
            ``kernelpolicy check`` reports, a line each); empty otherwise.
    """

    def __init__(self, message: str, issues: Sequence[PolicyIssue] = ()) -> None:
        super().__init__(message)
        self.issues = tuple(issues)


class EvidenceError(KernelPolicyError):
    """Evidence (the results ``kernelpolicy verify`` stores) is malformed, too large, or cannot
    be written safely.

    Reading evidence never raises it to the engine: an unreadable store is no evidence, with
    the reason in ``Evidence.problem``. It reaches callers that write evidence
    (``kernelpolicy verify``) and clients that decode a daemon's evidence.
    """


class ResolutionError(KernelPolicyError):
    """A decision was asked for that is an error, or for a feature the policies do not define."""


class DaemonError(KernelPolicyError):
    """The daemon cannot listen where asked, or a request to a daemon failed.

    Attributes:
        code: The gRPC status code of a failed request (``None`` when there was none).
    """

    def __init__(self, message: str, code: object = None) -> None:
        super().__init__(message)
        self.code = code


class InventoryError(KernelPolicyError):
    """A fleet inventory is missing, over its limits, or in no shape ``kernelpolicy diff``
    reads (a bad snapshot in it is a :class:`PlatformFileError` naming the file)."""
