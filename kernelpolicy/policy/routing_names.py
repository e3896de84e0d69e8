"""The call-context variables per-call routing reads (no pydantic: the engine imports this on
every resolve, also from a cached pack)."""

from __future__ import annotations

ROUTING_VARIABLES: dict[str, str] = {"batch": "int", "dtype": "string"}
"""The variables that ``by_batch`` and ``dtypes`` route on, with their context types. A feature
with those keys takes them as optional context (a call without them is not routed by them)
unless its ``context`` declares them, which makes them required as any declared variable is."""
