"""A stable hash of the inputs that mattered, so that ranks of one job can compare resolutions.

Only what can change a decision goes in: the primary device's kind (not its index, UUID or bus
address, which differ between ranks of one node), the driver and torch build, the versions of
libraries the policies name, the environment switches they read, forced implementations and the
policy files' contents; and, where a candidate is rolled out in stages, the node's cohort for
it (never its identity); and the candidates halted on this node (``halt_on``), never the counts
behind a halt.

Two nodes that run the same policy files on different hardware have different fingerprints;
what they share is the policy digest (``PolicySet.digest``, of the files' base names and texts),
which ``explain``, ``status``, the ``policy.digest`` label and ``kernelpolicy_policy_info``
show beside the fingerprint.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from kernelpolicy.digest import sha256
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy.compiled import PolicySet


def fingerprint(
    platform: Platform,
    env: Mapping[str, str],
    policies: PolicySet,
    forced: Mapping[str, str],
    evidence: str | None = None,
    *,
    cohorts: Mapping[str, str] | None = None,
    halted: Iterable[str] = (),
) -> str:
    device = platform.primary
    names = policies.library_names | {"torch"}
    inputs = {
        "vendor": platform.vendor,
        "device": None
        if device is None
        else [device.name, device.arch, device.capability, device.compute_units],
        "device_count": len(platform.devices),
        "driver": platform.driver.to_dict(),
        "torch": platform.torch.to_dict(),
        "libraries": {k: v for k, v in sorted(platform.libraries.items()) if k in names},
        "env": dict(sorted(env.items())),
        "forced": dict(sorted(forced.items())),
        "policies": policies.digest,
        "evidence": evidence,
    }
    if cohorts:  # a staged rollout decides by node: the cohorts are inputs (else unchanged)
        inputs["cohorts"] = dict(sorted(cohorts.items()))
    stopped = sorted(halted)
    if stopped:  # a halt decides by node too (else unchanged)
        inputs["halted"] = ",".join(stopped)  # names hold no commas
    blob = json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode()
    return sha256(blob).hexdigest()[:16]
