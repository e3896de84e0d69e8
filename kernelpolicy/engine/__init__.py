"""Stage 4 of the flow: the pure engine and the Resolution it returns."""

from kernelpolicy.engine.decide import resolve_policies
from kernelpolicy.engine.model import (
    CandidateResult,
    Check,
    CheckKind,
    Decision,
    ErrorCode,
    Reason,
)
from kernelpolicy.engine.resolution import Resolution

__all__ = [
    "CandidateResult",
    "Check",
    "CheckKind",
    "Decision",
    "ErrorCode",
    "Reason",
    "Resolution",
    "resolve_policies",
]
