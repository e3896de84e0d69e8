"""What the knob-table tests share (tests/test_engine_knobs_*.py): an engine's knob table, and
what the bridge tells an engine for a fixture at a release."""

from __future__ import annotations

from kernelpolicy.bridge import EngineSettings, engine_settings
from kernelpolicy.knobs import KnobTable, knob_table
from tests.helpers import resolve_on


def table(engine: str) -> KnobTable:
    found = knob_table(engine)
    assert found is not None
    return found


def told(
    fixture: str, engine: str, version: str | None, model_kind: str = "mha", **env: str
) -> EngineSettings:
    return engine_settings(
        resolve_on(fixture, **env), engine, env, engine_version=version, model_kind=model_kind
    )
