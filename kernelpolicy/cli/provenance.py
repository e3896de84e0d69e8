"""Where each value an answer used came from, for ``explain``: this shell, ``--env``, the
``--platform`` snapshot, ``KERNELPOLICY_OVERRIDES``, ``KERNELPOLICY_FORCE_*``, or nowhere.

With ``--platform`` the snapshot's environment replaces this shell's (the answer is for the
machine in the snapshot), so a variable set here is ignored; explain and env say so (a switch,
a force or an override), since the reader set it and expects it to count. ``exec`` is the other
way round: the engine it starts inherits this shell, so its answer uses this shell's
environment, and it names what the snapshot recorded that it did not use (:func:`left_out`).
The engine never sees any of this: it is a pure function of the environment it is given; this
module only tells the reader how that environment was layered.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from kernelpolicy.errors import SettingsError
from kernelpolicy.limits import shown
from kernelpolicy.platform.envvars import carried

if TYPE_CHECKING:
    from kernelpolicy.engine.resolution import Resolution
    from kernelpolicy.platform.model import Platform
    from kernelpolicy.policy.schema.conditions import Switch


OVERRIDES = "KERNELPOLICY_OVERRIDES"


class Origin(StrEnum):
    """Where a value came from (a closed set: explain --json's ``from``)."""

    SHELL = "shell"
    ENV_OPTION = "--env"
    SNAPSHOT = "snapshot"
    OVERRIDE = "override"
    FORCE = "force"
    UNSET = "unset"
    DAEMON = "daemon"


@dataclass(frozen=True)
class AnswerEnv:
    """The environment an answer uses and where each of its variables came from.

    Attributes:
        env: The environment (the snapshot's with ``--platform``, else this process's, then
            each ``--env K=V``).
        origins: Variable -> where its value in ``env`` came from.
        snapshot: Whether ``--platform`` was given (this shell's variables were not used).
        shell: This process's environment, to name a value ``--platform`` left out.
        unset_by_option: Variables a ``--env K=`` removed.
    """

    env: dict[str, str]
    origins: dict[str, Origin]
    snapshot: bool
    shell: Mapping[str, str]
    unset_by_option: frozenset[str]

    def ignored_shell_value(self, variable: str) -> str | None:
        """This shell's value of ``variable`` when ``--platform`` left it out (and it differs
        from what the answer used), else None."""
        value = self.shell.get(variable, "").strip()
        by_option = self.origins.get(variable) is Origin.ENV_OPTION
        if not self.snapshot or not value or by_option or variable in self.unset_by_option:
            return None
        return None if self.env.get(variable, "").strip() == value else value


def answer_env(args: argparse.Namespace, platform: Platform | None) -> AnswerEnv:
    """The environment of an answer: the snapshot's (with --platform) or this process's, then
    each ``--env K=V`` (``K=`` unsets K).

    Raises:
        SettingsError: An ``--env`` item is not ``KEY=VALUE``.
    """
    snapshot = getattr(args, "platform", None) is not None and platform is not None
    base = dict(platform.env) if snapshot and platform is not None else dict(os.environ)
    origin = Origin.SNAPSHOT if snapshot else Origin.SHELL
    origins = dict.fromkeys(base, origin)
    removed: set[str] = set()
    for item in getattr(args, "env", []):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SettingsError(f"--env {shown(item)!r}: expected KEY=VALUE (KEY= unsets KEY)")
        if value:
            base[key], origins[key] = value, Origin.ENV_OPTION
            removed.discard(key)
        else:
            base.pop(key, None)
            origins.pop(key, None)
            removed.add(key)
    return AnswerEnv(base, origins, snapshot, dict(os.environ), frozenset(removed))


def daemon_env(resolution: Resolution) -> AnswerEnv:
    """The environment of a daemon's answer (``explain --address``): the variables its
    policies read as it has them, and its settings' overrides as ``KERNELPOLICY_OVERRIDES``."""
    import json

    from kernelpolicy.engine.switches import force_variable

    env = dict(resolution.env)
    origins = dict.fromkeys(env, Origin.DAEMON)
    settings = {f: i for f, i in resolution.overrides.items() if force_variable(f) not in env}
    if settings:
        env["KERNELPOLICY_OVERRIDES"] = json.dumps(settings)
        origins["KERNELPOLICY_OVERRIDES"] = Origin.DAEMON
    return AnswerEnv(env, origins, False, {}, frozenset())


@dataclass(frozen=True)
class ValueSource:
    """One value a feature's decision read, and where it came from.

    Attributes:
        variable: The variable (a switch, ``KERNELPOLICY_FORCE_<FEATURE>`` or
            ``KERNELPOLICY_OVERRIDES``).
        value: Its value as carried (None: unset).
        origin: ``force`` and ``override`` for those; else where the switch's value came from.
        set_in: For a force or override, where its variable came from.
        states: (implementation, state) for each candidate the switch governs.
        ignored: This shell's value, ignored with ``--platform``.
    """

    variable: str
    value: str | None
    origin: Origin
    set_in: Origin | None = None
    states: tuple[tuple[str, str], ...] = ()
    ignored: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "variable": self.variable, "value": self.value, "from": self.origin.value,
            "set_in": None if self.set_in is None else self.set_in.value,
            "states": dict(self.states), "ignored_shell_value": self.ignored,
        }  # fmt: skip

    @property
    def worth_showing(self) -> bool:
        """Set somewhere, or set in this shell and ignored: not a plain 'unset'."""
        return self.origin is not Origin.UNSET or self.ignored is not None

    def line(self, snapshot: bool) -> str:
        """``MYLAB_FUSED_SOFTCAP unset in the snapshot: auto (your shell has ...)``."""
        if self.origin in (Origin.FORCE, Origin.OVERRIDE):
            text = f"{self.origin.value}: {self.variable}={self.value} {_where(self.set_in)}"
        elif not self.states:  # a force or override only this shell sets, ignored
            where = " in the snapshot" if snapshot else ""
            text = (
                f"override: none{where}" if self.variable == OVERRIDES
                else f"force: {self.variable} unset{where}"
            )  # fmt: skip
        else:
            text = f"switch: {self._switch_head(snapshot)}: {self._said()}"
        if self.ignored is not None:
            text += (
                f" (your shell has {self.variable}={shown(self.ignored, 40)}, ignored with "
                "--platform; pass --env to use it)"
            )
        return text

    def _switch_head(self, snapshot: bool) -> str:
        if self.value is None and self.origin is Origin.ENV_OPTION:
            return f"{self.variable} unset by --env"
        if self.value is None:
            return f"{self.variable} unset" + (" in the snapshot" if snapshot else "")
        return f"{self.variable}={self.value} {_where(self.origin)}"

    def _said(self) -> str:
        """What the switch says: one state for all its candidates, else each candidate's."""
        states = {state for _, state in self.states}
        if len(states) == 1:
            return next(iter(states))
        return ", ".join(f"{impl} {state}" for impl, state in self.states)


def _where(origin: Origin | None) -> str:
    return {
        Origin.SHELL: "from your shell", Origin.ENV_OPTION: "from --env",
        Origin.SNAPSHOT: "in the snapshot", Origin.DAEMON: "in the daemon's environment",
    }.get(origin, "") if origin is not None else ""  # fmt: skip


def value_sources(resolution: Resolution, feature: str, inputs: AnswerEnv) -> list[ValueSource]:
    """The force or override of ``feature`` (if any), then each switch its candidates read."""
    from kernelpolicy.engine.switches import force_variable, switch_value
    from kernelpolicy.policy.compiled import switch_variables
    from kernelpolicy.settings import settings_from

    out: list[ValueSource] = []
    force = force_variable(feature)
    overrides = settings_from(inputs.env).overrides
    shell_force = inputs.ignored_shell_value(force)
    if inputs.env.get(force, "").strip():
        forced = carried(inputs.env[force])
        out.append(ValueSource(force, forced, Origin.FORCE, inputs.origins.get(force),
                               ignored=shell_force))  # fmt: skip
    else:
        if shell_force is not None:
            out.append(ValueSource(force, None, Origin.UNSET, ignored=shell_force))
        shell_override = None if shell_force else _ignored_override(inputs, feature, overrides)
        if feature in overrides:
            where = inputs.origins.get(OVERRIDES)
            text = f"{{{feature!r}: {shown(overrides[feature], 40)!r}}}"
            out.append(ValueSource(OVERRIDES, text, Origin.OVERRIDE, where, ignored=shell_override))
        elif shell_override is not None:
            out.append(ValueSource(OVERRIDES, None, Origin.UNSET, ignored=shell_override))
    compiled = resolution.policies.features[feature]
    governed: dict[tuple[str, ...], list[tuple[str, Switch]]] = {}
    for candidate in compiled.candidates:
        for switch in candidate.spec.switches:
            governed.setdefault(switch_variables(switch), []).append((candidate.impl, switch))
    for switches in governed.values():
        variable, value = switch_value(switches[0][1], inputs.env)  # one of its aliases, maybe
        origin = inputs.origins.get(variable, Origin.UNSET) if value else Origin.UNSET
        if value is None and variable in inputs.unset_by_option:
            origin = Origin.ENV_OPTION
        states = tuple((impl, _state(switch, value)) for impl, switch in switches)
        ignored = inputs.ignored_shell_value(variable)
        out.append(ValueSource(variable, value, origin, None, states, ignored))
    return out


def _ignored_override(inputs: AnswerEnv, feature: str, overrides: Mapping[str, str]) -> str | None:
    """``{'feature': 'impl'}`` where this shell's ``KERNELPOLICY_OVERRIDES`` names ``feature``
    and ``--platform`` left it out (the answer's overrides name another or none), else None."""
    from kernelpolicy.settings import settings_from

    shell = inputs.ignored_shell_value(OVERRIDES)
    if shell is None:
        return None
    try:
        impl = settings_from({OVERRIDES: shell}).overrides.get(feature)
    except SettingsError:  # not this answer's: the shell's own commands say what is wrong
        return None
    return None if impl is None or overrides.get(feature) == impl else f"{{{feature!r}: {impl!r}}}"


def left_out(
    used: Mapping[str, str],
    dropped: Mapping[str, str],
    read: Iterable[str],
    prefixes: tuple[str, ...] = (),
) -> list[tuple[str, str, str | None]]:
    """The variables an answer reads that ``dropped`` sets (not blank) to another value than
    ``used``, the environment the answer used: (variable, its value in ``dropped``, in ``used``
    or None where unset), by name. Those it reads are ``read``, ``KERNELPOLICY_OVERRIDES``,
    any force, and any whose name starts with one of ``prefixes`` (an engine's own).

    ``env --platform`` drops this shell's environment for the snapshot's; ``exec --platform``
    the snapshot's for this shell's, which the engine it starts inherits.
    """
    from kernelpolicy.engine.switches import FORCE_PREFIX

    wanted = (FORCE_PREFIX, *prefixes)
    names = set(read) | {OVERRIDES} | {n for n in dropped if n.startswith(wanted)}
    out = []
    for name in sorted(names):
        value = dropped.get(name, "").strip()
        kept = used.get(name)
        if value and (kept or "").strip() != value:
            out.append((name, dropped[name], kept if kept and kept.strip() else None))
    return out


def _state(switch: Switch, value: str | None) -> str:
    """What one switch says under ``value``: auto, on, off, ignore, or error (a bad value)."""
    from kernelpolicy.settings import parse_bool

    if value is None:
        return switch.unset
    try:
        return switch.true if parse_bool(switch.env, value) else switch.false
    except SettingsError:
        return "error"
