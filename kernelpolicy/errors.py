"""The one exception tree of kernelpolicy.

Every error kernelpolicy raises on purpose derives from :class:`KernelPolicyError`::

    KernelPolicyError
    ├── PlatformFileError      a platform snapshot file is missing, not JSON, or not the schema
    ├── VersionError           a version string could not be read (raised only on request)
    └── SettingsError          an environment variable or setting has a value we cannot accept

The probe itself never raises: what it cannot read is recorded in ``Platform.probe_errors``.
User mistakes get messages that name the file, the key and what was expected.
"""

from __future__ import annotations


class KernelPolicyError(Exception):
    """Root of every error kernelpolicy raises on purpose."""


class PlatformFileError(KernelPolicyError):
    """A platform snapshot file could not be read or does not match ``kernelpolicy.platform/v1``."""


class VersionError(KernelPolicyError):
    """A version string could not be read as any version format the GPU stack uses."""


class SettingsError(KernelPolicyError):
    """An environment variable or setting holds a value kernelpolicy cannot accept."""
