"""Where a Resolution tells its node's daemon what happened at run time.

The engine only calls this interface; :mod:`kernelpolicy.server.reporter` implements it (a
bounded queue and a background thread), and ``resolve()`` and ``connect()`` attach it where a
daemon listens on the node.
"""

from __future__ import annotations

from typing import Any, Protocol


class RuntimeReporter(Protocol):
    """Both calls return at once, whatever the daemon does (never a wait, never an error)."""

    def report(self, kind: str, feature: str, impl: str, count: int = 1, detail: str = "") -> None:
        """One event: ``runtime_failure`` (``impl`` failed; ``detail`` says how)."""

    def loaded(self, feature: str, impl: str, function: Any) -> None:
        """``impl`` was loaded to serve ``feature`` (``function``, with its output guards)."""
