"""Dtypes by name: the names policies, evidence and checks use, their sizes, and the call-context
variables per-call routing reads. Plain values, no torch: every layer may import this."""

from __future__ import annotations

DTYPE_NAMES = ("float32", "bfloat16", "float16")
"""The dtypes the samplers serve, checks are named by and ``dtypes`` routes on, in this order."""

DTYPE_SIZES: dict[str, int] = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "half": 2, "float": 4,
    "float8_e4m3fn": 1, "float8_e4m3fnuz": 1, "float8_e5m2": 1, "float8_e5m2fnuz": 1,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1,
}  # fmt: skip
"""Bytes per element, by the names torch gives its dtypes (CEL's ``dtype_size()``)."""

ROUTING_VARIABLES: dict[str, str] = {"batch": "int", "dtype": "string"}
"""The variables that ``by_batch`` and ``dtypes`` route on, with their context types. A feature
with those keys takes them as optional context (a call without them is not routed by them)
unless its ``context`` declares them, which makes them required as any declared variable is."""


def dtype_name(dtype: object) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``: what policies, evidence and notes call a dtype."""
    return str(dtype).removeprefix("torch.")
