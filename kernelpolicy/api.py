"""``kernelpolicy.resolve()``: the in-process front door, with this machine's defaults.

The only place that reads the process environment and the policy files on a worker's behalf;
everything it hands the engine is explicit.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from kernelpolicy.engine.fallbacks import Host
from kernelpolicy.engine.forces import check_forces
from kernelpolicy.engine.resolution import Resolution
from kernelpolicy.engine.resolve import resolve_policies
from kernelpolicy.engine.switches import read_variables
from kernelpolicy.errors import SettingsError
from kernelpolicy.logs import log_resolution, runtime_log
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy.compiled import PolicySet
from kernelpolicy.policy.files import (
    check_policy_trust,
    expand_policy_paths,
    policy_files,
    read_listed_sources,
)
from kernelpolicy.policy.packcache import load_cached
from kernelpolicy.server.node import node_reporter
from kernelpolicy.settings import Settings, default_cache_dir, settings_from

_POLICY_CACHE: dict[tuple[tuple[str, int, int], ...], PolicySet] = {}
POLICY_CACHE_ENTRIES = 4
"""Loaded policy sets kept by :func:`load_policies_cached` (the newest; each edit of a file
makes a new entry, so a long-lived process that re-resolves would otherwise keep them all)."""


def load_policies_cached(
    paths: Iterable[str | Path],
    *,
    allow_untrusted: bool = False,
    cache_dir: Path | None = None,
    pack_cache: bool = True,
) -> PolicySet:
    """:func:`load_policies`, reused while no file changed (path, mtime and size).

    Trust is checked on every call, cached or not (a ``chmod`` does not change the mtime). A
    set not loaded yet in this process comes from the compiled-pack cache under ``cache_dir``
    when ``pack_cache`` is on and an entry matches the files' contents
    (:mod:`kernelpolicy.policy.packcache`).

    Raises:
        PolicyError: The files are invalid.
        UntrustedFileError: A file or directory is owned or writable by another user and
            ``allow_untrusted`` is not set.
    """
    given = list(paths)
    files = policy_files(given)
    check_policy_trust(given, files, allow_untrusted=allow_untrusted)
    key = tuple((str(f), *_stamp(f)) for f in files)
    cached = _POLICY_CACHE.pop(key, None)  # re-inserted below: the dict keeps use order
    if cached is None and pack_cache:
        cached = load_cached(read_listed_sources(files), cache_dir)  # listed and checked above
    elif cached is None:
        from kernelpolicy.policy.loader import load_policies

        cached = load_policies(given, allow_untrusted=allow_untrusted)
    _POLICY_CACHE[key] = cached
    while len(_POLICY_CACHE) > POLICY_CACHE_ENTRIES:
        del _POLICY_CACHE[next(iter(_POLICY_CACHE))]
    return cached


def existing_policy_paths(paths: Iterable[str | Path], origin: str) -> list[Path]:
    """``paths`` as given, once each exists; a missing one is an error naming where it came from.

    Args:
        paths: Policy files or directories.
        origin: Where they came from, for the message (``KERNELPOLICY_POLICY_PATHS``,
            ``--policies``).

    Raises:
        SettingsError: A path does not exist.
    """
    checked = [Path(p) for p in expand_policy_paths(paths)]  # "+DIR" adds to the bundled pack
    for path in checked:
        if not os.path.lexists(path):
            raise SettingsError(
                f"{path}: no such policy file or directory (from {origin}); expected a policy "
                f"file or a directory of *.toml files"
            )
    return checked


def _stamp(path: Path) -> tuple[int, int]:
    try:
        stat = path.stat()
    except (OSError, ValueError):  # ValueError: a NUL in the path; the loader reports it
        return (-1, -1)
    return (stat.st_mtime_ns, stat.st_size)


def resolve(
    platform: Platform | None = None,
    env: Mapping[str, str] | None = None,
    policies: PolicySet | Iterable[str | Path] | None = None,
    *,
    settings: Settings | None = None,
) -> Resolution:
    """Resolve every feature for a platform.

    Args:
        platform: Default: probe this machine.
        env: Default: ``os.environ`` (read once, never written).
        policies: A :class:`PolicySet`, or policy file/directory paths. Default: the paths in
            settings (``KERNELPOLICY_POLICY_PATHS``), else the bundled pack.
        settings: Default: read from ``env``.

    Returns:
        The :class:`Resolution`; decisions that are errors are values in it, not exceptions.

    Raises:
        PolicyError: The policy files are invalid.
        UntrustedFileError: A policy file or directory is owned or writable by another user
            (``KERNELPOLICY_ALLOW_UNTRUSTED_FILES=1`` accepts it).
        SettingsError: A ``KERNELPOLICY_*`` setting is invalid, a policy path from
            ``KERNELPOLICY_POLICY_PATHS`` does not exist, or a ``KERNELPOLICY_FORCE_*`` variable
            or ``KERNELPOLICY_OVERRIDES`` names a feature or implementation the policies lack.
    """
    environ: Mapping[str, str] = dict(os.environ) if env is None else env
    settings = settings if settings is not None else settings_from(environ)
    if policies is None:
        policy_set = load_policies_cached(
            existing_policy_paths(settings.policy_paths, "KERNELPOLICY_POLICY_PATHS"),
            allow_untrusted=settings.allow_untrusted_files,
            cache_dir=settings.cache_dir,
            pack_cache=settings.pack_cache,
        )
    elif isinstance(policies, PolicySet):
        policy_set = policies
    else:
        policy_set = load_policies_cached(
            policies,
            allow_untrusted=settings.allow_untrusted_files,
            cache_dir=settings.cache_dir,
            pack_cache=settings.pack_cache,
        )
    check_forces(policy_set, environ, settings.overrides)
    if platform is None:
        from kernelpolicy.platform.probing import probe

        platform = probe(
            environ=environ,
            libraries=sorted(policy_set.library_names),
            env_patterns=sorted(read_variables(policy_set)),
            hardware_cache=(settings.cache_dir or default_cache_dir())
            if settings.hardware_cache
            else None,
        )
    evidence = None
    if policy_set.needs_evidence:
        from kernelpolicy.evidence.store import load_evidence

        evidence = load_evidence(
            platform, settings.cache_dir, allow_untrusted=settings.allow_untrusted_files
        )
    host = Host(log=runtime_log(settings.log_format), reporter=node_reporter(settings))
    resolution = resolve_policies(
        platform, environ, policy_set, settings.overrides, evidence, host=host
    )
    log_resolution(resolution.log_fields(), settings.log_format)
    return resolution
