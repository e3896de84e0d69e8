"""``kernelpolicy.resolve()``: the in-process front door, with this machine's defaults.

It reads the process environment and gathers the engine's inputs the one way every front end
does (:mod:`kernelpolicy.inputs`); everything it hands the engine is explicit.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kernelpolicy.code_cache import code_cached
from kernelpolicy.engine.fallbacks import Host
from kernelpolicy.engine.resolution import Resolution
from kernelpolicy.gcpause import collector_paused
from kernelpolicy.inputs import gather, load_policies_for
from kernelpolicy.logs import log_resolution, runtime_log
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy.compiled import PolicySet
from kernelpolicy.server.node import halts_for_node, node_reporter
from kernelpolicy.settings import Settings, settings_from

__all__ = ["resolve"]


def resolve(
    platform: Platform | None = None,
    env: Mapping[str, str] | None = None,
    policies: PolicySet | Iterable[str | Path] | None = None,
    *,
    settings: Settings | None = None,
    node_halts: bool | None = None,
) -> Resolution:
    """Resolve every feature for a platform.

    Args:
        platform: Default: probe this machine.
        env: Default: ``os.environ`` (read once, never written).
        policies: A :class:`PolicySet`, or policy file/directory paths. Default: the paths in
            settings (``KERNELPOLICY_POLICY_PATHS``), else the bundled pack.
        settings: Default: read from ``env``.
        node_halts: Resolve without the candidates the node's daemon halted (``halt_on``), as
            the daemon does, read from its halts file beside its socket
            (:mod:`kernelpolicy.server.halts_file`; a file that cannot be trusted is ignored
            with a warning). Default: when ``platform`` is None (this machine is probed).

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
    # A worker's heap is large (kernelpolicy.gcpause); the code the first call compiles (the
    # classes' methods, select/gate) is compiled once per node (kernelpolicy.code_cache).
    with collector_paused(), code_cached():
        here = platform is None if node_halts is None else node_halts
        return _resolve(platform, env, policies, settings, here)


def _resolve(
    platform: Platform | None,
    env: Mapping[str, str] | None,
    policies: PolicySet | Iterable[str | Path] | None,
    settings: Settings | None,
    node_halts: bool,
) -> Resolution:
    environ: Mapping[str, str] = dict(os.environ) if env is None else env
    settings = settings if settings is not None else settings_from(environ)
    policy_set = (
        policies
        if isinstance(policies, PolicySet)
        else load_policies_for(settings, None if policies is None else policies)
    )
    inputs = gather(
        policy_set, settings, env=environ, platform=platform, overrides=settings.overrides
    )
    host = Host(log=runtime_log(settings.log_format), reporter=node_reporter(settings))
    halts = halts_for_node(settings) if node_halts else None
    resolution = inputs.resolve(host=host, halts=halts)
    log_resolution(resolved_fields(resolution), settings.log_format)
    return resolution


def resolved_fields(resolution: Resolution) -> dict[str, Any]:
    """The fields of ``resolve()``'s ``kernelpolicy.resolved`` event, whose level they set.

    ``errors`` and ``warnings`` are those of the features every kind of model uses; a feature
    of one kind (``model_kind``: the sparse indexer and MHC of sparse-MLA models, the MLA or
    MHA attention backend) has its own in ``model_kind_errors`` and ``model_kind_warnings``,
    which leave the level alone: a worker's process serves one model, which ``resolve()`` does
    not know, so an MI300X's sparse indexer error would have made every worker's resolution an
    error. The policy files are named by their digest and counted (``policy_digest``,
    ``policy_files``), as the daemon's events name them, where their paths made the line long.
    """
    fields = resolution.log_fields()
    del fields["errors"], fields["warnings"], fields["policies"]
    one_kind = resolution.policies.model_kind_features
    errors = resolution.errors
    warned = {name: d.warnings for name, d in resolution.decisions.items() if d.warnings}
    fields["errors"] = {n: e for n, e in errors.items() if n not in one_kind} or None
    fields["warnings"] = [w for n, ws in warned.items() if n not in one_kind for w in ws] or None
    if found := {n: e for n, e in errors.items() if n in one_kind}:
        fields["model_kind_errors"] = found
    if said := [w for n, ws in warned.items() if n in one_kind for w in ws]:
        fields["model_kind_warnings"] = said
    fields["policy_digest"] = resolution.policies.digest
    fields["policy_files"] = len(resolution.policies.files)
    return fields
