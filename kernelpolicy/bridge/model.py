"""What an engine is told: frozen values the commands render, never work out again."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from kernelpolicy.engine.routing import label


class Status(StrEnum):
    """How one decision reaches an engine (closed set)."""

    TOLD = "told"  # variables and/or flags make the engine run the chosen implementation
    PLUGIN = "plugin"  # kernelpolicy's plugin inside the engine runs it (exec turns it on)
    DEFAULT = "default"  # the engine runs it by default: nothing to set
    INEXPRESSIBLE = "inexpressible"  # the engine cannot be made to run exactly this
    UNDECLARED = "undeclared"  # the feature tells this engine, but not for this choice
    NOT_FOR_ENGINE = "not_for_engine"  # the feature tells this engine nothing at all
    OTHER_MODEL_KIND = "other_model_kind"  # only for another kind of model (--model-kind)
    NOT_APPLICABLE = "not_applicable"  # no implementation applies on this platform
    ERROR = "error"  # the decision is an error: nothing can be told


@dataclass(frozen=True)
class BatchChoice:
    """What ``select()`` tries first for a call whose ``batch`` is in ``[low, high]`` (``high``
    None: no upper bound), before the candidates' per-call conditions."""

    low: int
    high: int | None
    impl: str

    def to_dict(self) -> dict[str, Any]:
        return {"batch": [self.low, self.high], "impl": self.impl}


NO_IMPL = "(none)"
"""What a :class:`DtypeChoice` names where no implementation serves the dtype (``select()``
raises for such a call)."""


@dataclass(frozen=True)
class DtypeChoice:
    """What ``select()`` tries first for a call of logits in ``dtype`` (stored evidence per
    dtype, or a kernel that failed for it at run time): for calls that give no batch
    (``low`` None), or for those whose batch is in ``[low, high]`` (``high`` None: no upper
    bound). ``changed``: the dtype moves the call off the choice it would have without one
    (the engine's one choice, or the batch range's)."""

    dtype: str
    impl: str
    low: int | None = None
    high: int | None = None
    changed: bool = False

    def to_dict(self) -> dict[str, Any]:
        batch = None if self.low is None else [self.low, self.high]
        return {"dtype": self.dtype, "batch": batch, "impl": self.impl, "changed": self.changed}

    def calls(self, routed: bool) -> str:
        """Which calls: ``float16``, or with the batch where the feature routes by batch."""
        if self.low is not None:
            return f"batch {label(self.low, self.high)} {self.dtype}"
        return f"{self.dtype} without a batch" if routed else self.dtype


@dataclass(frozen=True)
class Told:
    """What one engine is told for one decision.

    Attributes:
        env: (variable, value) pairs, in the policy's order.
        flags: Words for the engine's command line.
        inexpressible: The trade-off, when the engine cannot run exactly the chosen one.
        gives_up: Decisions that turning ``shared_switch`` off would also lose.
        plugin: What kernelpolicy's plugin inside the engine does to carry the choice
            (status ``PLUGIN``).
        by_batch: Per batch range, what ``select()`` chooses in-process (the feature's
            ``by_batch`` rows); the engine is told one choice for every batch.
        batch_conditions: Implementations whose ``when`` reads the call's ``batch``.
        by_dtype: Per dtype the feature routes on (and per batch range, where it routes by
            batch too), what ``select()`` chooses in-process for a call that gives its dtype;
            set only where some dtype changes the choice.
        model_kind: The only kind of model the feature is for (``mla``, ``mha``), where it
            is not the kind the engine is told for (status ``OTHER_MODEL_KIND``).
    """

    feature: str
    impl: str | None
    status: Status
    env: tuple[tuple[str, str], ...] = ()
    flags: tuple[str, ...] = ()
    inexpressible: str | None = None
    shared_switch: str | None = None
    gives_up: tuple[str, ...] = ()
    reference: str | None = None
    note: str | None = None
    plugin: str | None = None
    by_batch: tuple[BatchChoice, ...] = ()
    batch_conditions: tuple[str, ...] = ()
    by_dtype: tuple[DtypeChoice, ...] = ()
    model_kind: str | None = None

    @property
    def per_batch(self) -> bool:
        """In-process, the choice depends on the call's batch: an engine cannot be told that."""
        return bool(self.by_batch or self.batch_conditions)

    def per_batch_dict(self) -> dict[str, Any] | None:
        """``{"by_batch": [...], "conditions": [...]}``, or None where the choice is one."""
        if not self.per_batch:
            return None
        return {
            "by_batch": [choice.to_dict() for choice in self.by_batch],
            "conditions": list(self.batch_conditions),
        }

    def per_batch_note(self, engine: str) -> str:
        """One line saying what ``select()`` does per batch and that ``engine`` cannot."""
        parts = [f"batch {label(c.low, c.high)}: {c.impl}" for c in self.by_batch] + [
            f"{impl}'s condition reads batch" for impl in self.batch_conditions
        ]
        if self.plugin is not None:
            return (
                f"{self.feature}: chosen per call by batch ({', '.join(parts)}), carried into "
                f"{engine} by kernelpolicy's plugin ({self.plugin})"
            )
        return (
            f"{self.feature}: chosen per call by batch in-process only (resolve().select(), "
            f"the worker bridge): {', '.join(parts)}; {engine} is told one choice, "
            f"{self.impl}, for every batch"
        )

    @property
    def per_dtype(self) -> bool:
        """In-process, some dtype is served by another implementation than the engine is told."""
        return bool(self.by_dtype)

    def per_dtype_list(self) -> list[dict[str, Any]] | None:
        """Every (dtype, batch range) choice, or None where the dtype changes nothing."""
        return [c.to_dict() for c in self.by_dtype] if self.by_dtype else None

    def per_dtype_note(self, engine: str) -> str:
        """One line saying which calls ``select()`` moves by their dtype, and that ``engine``
        cannot."""
        routed = any(c.low is not None for c in self.by_dtype)
        parts = ", ".join(f"{c.calls(routed)}: {c.impl}" for c in self.by_dtype if c.changed)
        if self.plugin is not None:
            return (
                f"{self.feature}: chosen per call by dtype ({parts}), carried into {engine} by "
                f"kernelpolicy's plugin ({self.plugin})"
            )
        return (
            f"{self.feature}: chosen per call by dtype in-process only (resolve().select(), "
            f"the worker bridge): {parts}; {engine} is told one choice, {self.impl}, for "
            "every dtype"
        )

    def per_call_notes(self, engine: str) -> list[str]:
        """The per-batch and per-dtype notes that apply (none where the choice is one)."""
        notes = [self.per_batch_note(engine)] if self.per_batch else []
        return notes + ([self.per_dtype_note(engine)] if self.per_dtype else [])

    def summary(self) -> str:
        """One line: the settings, or why there are none."""
        words = [f"{k}={v}" for k, v in self.env] + list(self.flags)
        text = " ".join(words)
        if self.status is Status.INEXPRESSIBLE:
            return f"{text} (INEXPRESSIBLE)" if text else "INEXPRESSIBLE"
        if self.status is Status.TOLD:
            return text
        if self.status is Status.PLUGIN:
            return f"{text} (kernelpolicy plugin)" if text else "(kernelpolicy plugin)"
        return {
            Status.DEFAULT: "(engine default)",
            Status.UNDECLARED: "(not declared)",
            Status.NOT_FOR_ENGINE: "-",
            Status.OTHER_MODEL_KIND: f"({self.model_kind or 'other'} models only)",
            Status.NOT_APPLICABLE: "-",
            Status.ERROR: "ERROR",
        }[self.status]

    def outcome(self) -> str:
        """The implementation decided, or in explain's words why there is none: ``ERROR`` (only
        where the decision is an error), ``(no implementation applies)``, with ``mla models
        only`` where the feature is for another kind of model than the engine is told for, or
        ``not told to the engine`` where no rule tells this engine about it. What exec's log
        shows."""
        if self.impl is not None:
            return self.impl
        if self.status is Status.NOT_FOR_ENGINE:  # a feature this engine is told nothing of
            # ERROR only where the decision is one (operators alert on the word); a feature
            # none of whose implementations applies here (an AMD-only kernel on an H100) is not
            return (
                "ERROR (not told to the engine)"
                if self.note is not None
                else "(no implementation applies; not told to the engine)"
            )
        only = f"{self.model_kind or 'other'} models only"
        other = self.status is Status.OTHER_MODEL_KIND
        if self.note is not None:  # the decision's error
            return f"ERROR ({only})" if other else "ERROR"
        return f"(no implementation applies; {only})" if other else "(no implementation applies)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "impl": self.impl,
            "status": self.status.value,
            "env": dict(self.env),
            "flags": list(self.flags),
            "inexpressible": self.inexpressible,
            "shared_switch": self.shared_switch,
            "plugin": self.plugin,
            "gives_up": list(self.gives_up),
            "reference": self.reference,
            "note": self.note,
            "per_batch": self.per_batch_dict(),
            "per_dtype": self.per_dtype_list(),
        }


@dataclass(frozen=True)
class EngineSettings:
    """Everything one engine is told on one platform, with what could not be told.

    Attributes:
        engine: The engine's name (``vllm``, ``sglang``).
        version: Its installed (or given) version, ``None`` when unknown.
        release: The release of the knob tables the rules were matched as (the newest where
            none is installed, it cannot be read or it is newer than the tables; ``0.32.0``
            for ``0.32.0rc1``), or whose knobs stand for a version the tables hold only as
            other builds of its release (``0.8.5.post1`` for ``0.8.5``); ``None`` where the
            version lies between known releases.
        env: Variable -> value for the engine's environment (user-set variables kept).
        flags: Words to append to its command line.
        decisions: Feature -> :class:`Told`, in policy order.
        warnings: Inexpressible decisions, user values kept, an unknown engine version.
        errors: Decision errors (explain's text) and conflicting settings; non-empty means the
            engine must not be started.
        kept: Variables the user set to something else than the policy would: never overwritten.
        feature_warnings: (feature, warning) for each warning of :attr:`warnings` about one
            feature, so a view of some features shows only theirs.
        release_note: The warning of :attr:`warnings` that says which release the rules were
            matched as (the engine is not installed here, or newer than the tables).
    """

    engine: str
    version: str | None
    fingerprint: str
    model_kind: str
    env: dict[str, str]
    flags: tuple[str, ...]
    decisions: dict[str, Told]
    warnings: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    kept: dict[str, str] = field(default_factory=dict)
    release: str | None = None
    feature_warnings: tuple[tuple[str, str], ...] = ()
    release_note: str | None = None

    def warnings_for(self, features: Sequence[str], *, rows: bool = True) -> list[str]:
        """The warnings that concern ``features``: those about one feature only where it is
        one of them, the release note only where ``rows`` (a row of this engine is shown)."""
        about = {text: name for name, text in self.feature_warnings}
        return [
            w for w in self.warnings
            if about.get(w) in (None, *features) and (rows or w != self.release_note)
        ]  # fmt: skip

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def version_assumed(self) -> bool:
        """No version was installed or given: the rules were matched as the knob tables'
        newest release (:attr:`release`), which :attr:`matched_version` then names."""
        return not self.version and self.release is not None

    @property
    def matched_version(self) -> str | None:
        """The version installed or given; where there is none, the release the rules were
        matched as (:attr:`version_assumed`); ``None`` where neither is known."""
        return self.release if self.version_assumed else self.version

    @property
    def label(self) -> str:
        """``vllm 0.12.0``; ``vllm 0.33.0 (newest known)`` where none is installed or given and
        the rules were matched as the tables' newest release; ``vllm`` where neither is known."""
        if self.version_assumed:
            return f"{self.engine} {self.release} (newest known)"
        return f"{self.engine} {self.version}" if self.version else self.engine

    @property
    def per_batch(self) -> tuple[str, ...]:
        """The features whose in-process choice depends on the call's batch."""
        return tuple(name for name, told in self.decisions.items() if told.per_batch)

    @property
    def per_dtype(self) -> tuple[str, ...]:
        """The features some dtype of which is served in-process by another implementation
        than the engine is told."""
        return tuple(name for name, told in self.decisions.items() if told.per_dtype)

    def per_call_notes(self) -> list[str]:
        """One line per feature of :attr:`per_batch` and per feature of :attr:`per_dtype`, in
        policy order (see :meth:`Told.per_call_notes`)."""
        return [n for told in self.decisions.values() for n in told.per_call_notes(self.engine)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "version": self.version,
            "release": self.release,
            "fingerprint": self.fingerprint,
            "model_kind": self.model_kind,
            "env": dict(self.env),
            "flags": list(self.flags),
            "errors": list(self.errors),
            "warnings": list(self.warnings),
            "kept": dict(self.kept),
            "per_batch": list(self.per_batch),
            "per_dtype": list(self.per_dtype),
            "decisions": {name: told.to_dict() for name, told in self.decisions.items()},
        }
