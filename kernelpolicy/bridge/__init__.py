"""The engine bridge: tell an unmodified inference engine (vLLM, SGLang) what was decided.

Policies declare, per candidate and engine, the environment variables and command-line flags
that make the engine run that implementation (``engines.vllm = [...]``), with version ranges
and an ``inexpressible`` trade-off where the engine has no switch for it. ``engine_settings``
turns a resolution into those settings; ``kernelpolicy env`` prints them and ``kernelpolicy
exec`` starts the engine with them.
"""

from __future__ import annotations

from kernelpolicy.bridge.model import EngineSettings, Status, Told
from kernelpolicy.bridge.translate import MODEL_KINDS, engine_settings
from kernelpolicy.inputs import ENGINE_DISTRIBUTIONS, distribution
from kernelpolicy.policy.schema.bridge import flag_options

__all__ = [
    "ENGINE_DISTRIBUTIONS",
    "MODEL_KINDS",
    "EngineSettings",
    "Status",
    "Told",
    "distribution",
    "engine_settings",
    "flag_options",
]
