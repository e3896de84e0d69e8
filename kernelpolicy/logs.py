"""Decision logs: one structlog event per resolution, JSON or a readable line, on stderr.

structlog is imported on first use only (with rich installed it costs ~100 ms), and loggers are
built per call site rather than through structlog's process-global configuration, so embedding
kernelpolicy never changes the host application's logging.
"""

from __future__ import annotations

import sys
from functools import cache
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from kernelpolicy.engine.resolution import Resolution


@cache
def _logger(fmt: str, stream: TextIO) -> Any:
    import structlog

    renderer: Any = (
        structlog.processors.JSONRenderer(sort_keys=True)
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    return structlog.wrap_logger(
        structlog.PrintLogger(file=stream),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
    )


def get_logger(fmt: str, stream: TextIO | None = None) -> Any:
    """A structlog logger writing ``fmt`` (``json`` or ``console``) to ``stream`` (stderr)."""
    return _logger(fmt, stream or sys.stderr)


def log_resolution(resolution: Resolution, fmt: str, stream: TextIO | None = None) -> None:
    """Emit the one ``kernelpolicy.resolved`` event of a resolution (nothing when ``off``)."""
    if fmt == "off":
        return
    decisions = resolution.decisions
    errors = resolution.errors
    warnings = [w for d in decisions.values() for w in d.warnings]
    log = get_logger(fmt, stream)
    emit = log.error if errors else log.warning if warnings else log.info
    emit(
        "kernelpolicy.resolved",
        fingerprint=resolution.fingerprint,
        vendor=resolution.platform.vendor,
        arch=resolution.platform.primary.arch if resolution.platform.primary else None,
        decisions={name: d.impl or f"<{d.reason.value}>" for name, d in decisions.items()},
        errors=errors or None,
        warnings=warnings or None,
        policies=list(resolution.policies.files),
    )
