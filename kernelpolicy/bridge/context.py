"""The facts an engine rule is matched against: the platform, the environment the engine will
see and the engine release."""

from __future__ import annotations

from collections.abc import Mapping

from packaging.version import Version

from kernelpolicy.platform.model import Platform
from kernelpolicy.policy.compiled import CompiledEngineRule
from kernelpolicy.settings import switched_on

__all__ = ["RuleContext"]


class RuleContext:
    """The facts rules are matched against, read once per translation."""

    def __init__(
        self,
        platform: Platform,
        env: Mapping[str, str],
        version: Version | None,
        given: Version | None = None,
    ) -> None:
        self.platform = platform
        self.env = env
        # the version the rules' ranges are tested with (clamped to the knob tables)
        self.version = version
        # the release the engine runs, where known (``MatchedRelease.given``): what
        # kernelpolicy's own plugin does in it is asked of this, not of the clamped version
        self.given = given if given is not None else version
        self.arch = platform.primary.arch if platform.primary else None

    def on(self, variable: str) -> bool:
        return switched_on(self.env, variable)

    def matches(self, rule: CompiledEngineRule) -> bool:
        spec = rule.spec
        if (
            rule.versions is not None
            and self.version is not None
            and not rule.versions.contains(self.version, prereleases=True)
        ):
            return False
        if spec.vendor is not None and spec.vendor != self.platform.vendor:
            return False
        if spec.arch is not None and self.arch not in spec.arch:
            return False
        if not all(check.satisfied(self.platform.libraries) for check in rule.libraries):
            return False
        return all(self.on(variable) for variable in spec.if_on)
