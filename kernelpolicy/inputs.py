"""The engine's inputs, gathered one way for every front end (``resolve()``, ``explain``,
``env``/``exec``, ``labels``, ``matrix``, the daemon): settings -> policies -> platform (given,
or probed for what the policies and their bridge rules read, the inference engines'
distributions included) -> the answer's environment and forces -> evidence.

The front ends differ only in where each input comes from (a ``--platform`` snapshot, ``--env``,
a daemon's files); the steps and their checks are these. The daemon, which gathers at start and
then reads its policies again at each reload, answers requests with their own platform or
environment and hands its inputs to clients, takes the same steps one by one (:func:`forces`,
:func:`evidence_for`, :func:`platform_evidence`, :func:`given`); only this module loads the
evidence store or builds :class:`Inputs` (``tests/test_layers.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kernelpolicy.engine.decide import resolve_policies
from kernelpolicy.engine.forces import check_forces
from kernelpolicy.engine.switches import read_variables
from kernelpolicy.errors import SettingsError
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy.compiled import PolicySet
from kernelpolicy.policy.files import (
    check_policy_trust,
    expand_policy_paths,
    policy_files,
    read_listed_sources,
)
from kernelpolicy.policy.packcache import load_cached
from kernelpolicy.settings import Settings, bundled_policy_dir, default_cache_dir, settings_from
from kernelpolicy.settings.readers import read_value, variable

if TYPE_CHECKING:
    from kernelpolicy.engine.fallbacks import Host
    from kernelpolicy.engine.resolution import Resolution
    from kernelpolicy.evidence.store import Evidence

OVERRIDES_VARIABLE = variable("overrides")

ENGINE_DISTRIBUTIONS: dict[str, str] = {"vllm": "vllm", "sglang": "sglang"}
"""Inference engine -> the distribution that holds its version (others: the engine's name)."""


def distribution(engine: str) -> str:
    """The distribution name that holds ``engine``'s version (``vllm`` -> ``vllm``)."""
    return ENGINE_DISTRIBUTIONS.get(engine, engine)


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
        cached = load_cached(  # listed and checked above
            read_listed_sources(files, trusted=not allow_untrusted), cache_dir
        )
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
        try:
            os.lstat(path)
        except FileNotFoundError:
            raise SettingsError(
                f"{path}: no such policy file or directory (from {origin}); expected a policy "
                f"file or a directory of *.toml files"
            ) from None
        except OSError as exc:  # a directory above that this user may not enter, say
            raise SettingsError(
                f"{path}: cannot be read (from {origin}): {exc.strerror or exc}; expected a "
                "policy file or a directory of *.toml files this user can read"
            ) from None
        except ValueError:  # a NUL in the path: the loader says so
            pass
    return checked


def _stamp(path: Path) -> tuple[int, int]:
    try:
        stat = path.stat()
    except (OSError, ValueError):  # ValueError: a NUL in the path; the loader reports it
        return (-1, -1)
    return (stat.st_mtime_ns, stat.st_size)


def load_policies_for(settings: Settings, paths: Iterable[str | Path] | None = None) -> PolicySet:
    """The policies at ``paths`` (default: the settings' ``KERNELPOLICY_POLICY_PATHS``, else the
    bundled pack), loaded with the settings' trust opt-out and compiled-pack cache.

    Raises:
        SettingsError: One of the settings' paths does not exist, naming where it came from
            (the variable, or the bundled pack where none is set).
    """
    given = (
        existing_policy_paths(settings.policy_paths, _policy_origin(settings))
        if paths is None
        else paths
    )
    return load_policies_cached(
        given,
        allow_untrusted=settings.allow_untrusted_files,
        cache_dir=settings.cache_dir,
        pack_cache=settings.pack_cache,
    )


def _policy_origin(settings: Settings) -> str:
    """Where the settings' policy paths came from, for a missing one's message."""
    if settings.policy_paths == (bundled_policy_dir(),):
        return "bundled pack"
    return "KERNELPOLICY_POLICY_PATHS"


def probe_reads(policies: PolicySet) -> tuple[list[str], list[str]]:
    """(distributions, variable patterns) the probe must read for these policies and the
    inference engines they tell."""
    libraries = set(policies.library_names)
    variables = set(read_variables(policies))
    for engine in policies.engine_names:
        libraries.add(distribution(engine))
    for feature in policies.features.values():
        rule_sets = [*feature.engines.values()]
        rule_sets += [rules for c in feature.candidates for rules in c.engines.values()]
        for rules in rule_sets:
            for rule in rules:
                libraries.update(check.name for check in rule.libraries)
                variables.update(rule.spec.if_on)
                variables.update(rule.spec.env)
    return sorted(libraries), sorted(variables)


PlatformSource = Callable[[list[str], list[str]], Platform]
"""Gives the platform, told the distributions and variable patterns a probe must read."""


@dataclass(frozen=True)
class Inputs:
    """Everything the engine decides from, gathered (see :func:`gather`)."""

    platform: Platform
    env: Mapping[str, str]
    policies: PolicySet
    overrides: Mapping[str, str]
    evidence: Evidence | None

    def resolve(
        self, *, host: Host | None = None, halts: Mapping[str, str] | None = None
    ) -> Resolution:
        """The engine's answer for these inputs (evidence only where the policies read it)."""
        evidence = self.evidence if self.policies.needs_evidence else None
        return resolve_policies(
            self.platform, self.env, self.policies, self.overrides, evidence,
            halts=halts, host=host,
        )  # fmt: skip


def gather(
    policies: PolicySet,
    local: Settings,
    *,
    env: Mapping[str, str] | Callable[[Platform], Mapping[str, str]],
    platform: Platform | PlatformSource | None = None,
    evidence: bool | None = None,
    overrides: Mapping[str, str] | None = None,
) -> Inputs:
    """The engine's inputs, in the one order.

    Args:
        policies: The loaded policies (:func:`load_policies_for`).
        local: This machine's settings: where the evidence store and the caches are and
            whether to trust them, even when answering for another platform.
        env: The environment the answer uses, or how to get it from the platform (a
            snapshot's recorded environment). Its ``KERNELPOLICY_FORCE_*`` and
            ``KERNELPOLICY_OVERRIDES`` are checked against the policies.
        platform: Given, or a source told what to read (a ``--platform`` file or a probe);
            default: a probe of this machine.
        evidence: Load the evidence store: None when the policies need it, True always (the
            node labels show it).
        overrides: Feature -> implementation to force (default: ``KERNELPOLICY_OVERRIDES``
            of ``env``).

    Raises:
        SettingsError: A force names a feature or implementation the policies lack.
        EvidenceError, UntrustedFileError: The store cannot be read or trusted.
    """
    used = env if isinstance(env, Mapping) else None
    forced = _own_forces(policies, used, overrides) if used is not None else {}  # before a probe
    if not isinstance(platform, Platform):
        libraries, patterns = probe_reads(policies)
        source = platform or _prober(local, used)
        platform = source(libraries, patterns)
    if used is None:
        assert callable(env)
        used = env(platform)
        forced = _own_forces(policies, used, overrides)
    store = None
    if evidence is not False:
        store = evidence_for(
            policies, platform, local.cache_dir,
            allow_untrusted=local.allow_untrusted_files, always=bool(evidence),
        )  # fmt: skip
    return Inputs(platform, dict(used), policies, forced, store)


def given(
    platform: Platform,
    env: Mapping[str, str],
    policies: PolicySet,
    overrides: Mapping[str, str],
    evidence: Evidence | None,
) -> Inputs:
    """Inputs gathered before, taken as they are: the daemon's (its start's platform,
    environment and overrides, the policies and evidence of a reload), a request's (each part
    checked by :func:`forces` and :func:`platform_evidence`), a daemon's answer rebuilt in a
    client. Nothing is read or checked here; :meth:`Inputs.resolve` uses the evidence only
    where the policies read it."""
    return Inputs(platform, env, policies, overrides, evidence)


def forces(
    policies: PolicySet, env: Mapping[str, str], overrides: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The overrides, once they and ``env``'s ``KERNELPOLICY_FORCE_*`` name only features and
    implementations the policies have.

    Args:
        policies: What the forces must name.
        env: The environment the answer uses.
        overrides: Feature -> implementation; default: ``env``'s ``KERNELPOLICY_OVERRIDES``
            alone (none where it is unset), read as the settings read it: ``env``'s other
            settings are not checked (a request's environment, whose policies, store and trust
            are the daemon's).

    Raises:
        SettingsError: A force or override names a feature or implementation the policies
            lack, or ``KERNELPOLICY_OVERRIDES`` is no JSON object of strings.
    """
    chosen = _env_overrides(env) if overrides is None else overrides
    check_forces(policies, env, chosen)
    return dict(chosen)


def _own_forces(
    policies: PolicySet, env: Mapping[str, str], overrides: Mapping[str, str] | None
) -> dict[str, str]:
    """:func:`forces` of a front end's own environment, whose settings are read whole (a bad
    ``KERNELPOLICY_*`` value is an error even where it is not the overrides)."""
    return forces(policies, env, settings_from(env).overrides if overrides is None else overrides)


def _env_overrides(env: Mapping[str, str]) -> dict[str, str]:
    value = env.get(OVERRIDES_VARIABLE)
    if value is None:
        return {}
    read = read_value("overrides", value)
    assert isinstance(read, dict)  # the overrides' reader gives a dict or raises
    return read


def evidence_for(
    policies: PolicySet,
    platform: Platform,
    cache_dir: Path | None,
    *,
    allow_untrusted: bool,
    always: bool = False,
) -> Evidence | None:
    """The stored evidence for ``platform`` where the policies read it (``verified = true``),
    or always (the node labels show it); else None.

    Args:
        policies: Whether they read the store.
        platform: Whose evidence (its key names the file).
        cache_dir: Where the store is (``KERNELPOLICY_CACHE_DIR`` of this machine, even when
            answering for another platform).
        allow_untrusted: ``KERNELPOLICY_ALLOW_UNTRUSTED_FILES`` of this machine.
        always: Load it whether or not the policies read it.

    Returns:
        The evidence (a store that cannot be read or trusted is no entries, with its
        ``problem``), or None where it was not asked for.
    """
    if not (always or policies.needs_evidence):
        return None
    from kernelpolicy.evidence.store import load_evidence

    return load_evidence(platform, cache_dir, allow_untrusted=allow_untrusted)


def platform_evidence(evidence: Evidence | None, platform: Platform) -> Evidence | None:
    """``evidence`` where it is ``platform``'s (the same
    :func:`~kernelpolicy.evidence.store.platform_key`: device, driver, torch and kernel
    libraries), else None: ``verified = true`` means "passed ``kernelpolicy verify`` on that
    platform", so a node's evidence says nothing of another platform."""
    if evidence is None:
        return None
    from kernelpolicy.evidence.store import platform_key

    return evidence if evidence.key == platform_key(platform) else None


def _prober(local: Settings, environ: Mapping[str, str] | None) -> PlatformSource:
    def probe_here(libraries: list[str], patterns: list[str]) -> Platform:
        from kernelpolicy.platform.probing import probe

        cache = (local.cache_dir or default_cache_dir()) if local.hardware_cache else None
        return probe(
            environ=environ, libraries=libraries, env_patterns=patterns, hardware_cache=cache
        )

    return probe_here
