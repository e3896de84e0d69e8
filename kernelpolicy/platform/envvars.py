"""The environment variables a resolution may depend on, and the bounded form they travel in.

Only variables the policies read are captured (their switch names and
``KERNELPOLICY_FORCE_<FEATURE>``), and every captured value is put in its *carried* form before
anything stores, logs, raises or sends it: a value up to ``SHOWN_ENV_VALUE_CHARS`` is kept
as it is (surrounding spaces dropped, as every reader of a switch drops them), a longer one is
cut and marked (``...(cut, N chars)``), and one over ``MAX_ENV_VALUE_CHARS`` is not carried at
all (a marker names its length and the limit). No valid switch or implementation name is that
long, so the carried form decides exactly as the original would, and carrying it again changes
nothing: a daemon's answer rebuilt in a client gives the same decisions and fingerprint.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from fnmatch import translate
from functools import cache

from kernelpolicy.encoding import control_character
from kernelpolicy.limits import MAX_ENV_VALUE_CHARS, shown

# When the caller does not say which policies apply: the switches the bundled policies read
# (the legacy names users already set) and forced implementations. Settings
# (KERNELPOLICY_TLS_*, ...) and the variables only the probe reads (CUDA_VISIBLE_DEVICES, ...)
# are not captured: the devices already show their effect, and a snapshot carries nothing the
# policies do not read.
DEFAULT_ENV_PATTERNS: tuple[str, ...] = (
    "KERNELPOLICY_FORCE_*",
    "VLLM_USE_FLASHINFER_SAMPLER",
    "VLLM_ROCM_USE_AITER",
    "SGLANG_USE_AITER",
    "SGLANG_DISABLE_AITER_GREEDY_SAMPLE",
)

_OVER = re.compile(r"<not carried: (\d+) chars, over MAX_ENV_VALUE_CHARS \(\d+\)>")


def carried(value: str) -> str:
    """The form of an environment value that kernelpolicy stores, logs and sends.

    Idempotent: ``carried(carried(v)) == carried(v)``.
    """
    if len(value) > MAX_ENV_VALUE_CHARS:
        limit = MAX_ENV_VALUE_CHARS
        return f"<not carried: {len(value)} chars, over MAX_ENV_VALUE_CHARS ({limit})>"
    return shown(value.strip())


def over_limit(value: str) -> int | None:
    """The original length when ``value`` is the marker of a value that was not carried."""
    match = _OVER.fullmatch(value)
    return int(match.group(1)) if match else None


def capture_env(environ: Mapping[str, str], patterns: Iterable[str]) -> dict[str, str]:
    """The variables whose names match a pattern (shell-style, case-sensitive), sorted by name,
    each value in its carried form (see :func:`carried`). A name with a control character
    (``KERNELPOLICY_FORCE_X\\n``, which a ``*`` matches) is no switch, and a snapshot refuses
    it: it is left out."""
    exact, matcher = _patterns(tuple(patterns))
    return {
        name: carried(environ[name])
        for name in sorted(environ)
        if (name in exact or (matcher is not None and matcher(name)))
        and control_character(name) is None
    }


@cache
def _patterns(patterns: tuple[str, ...]) -> tuple[frozenset[str], Callable[[str], object] | None]:
    """Plain names, and one compiled matcher for the shell-style patterns among ``patterns``
    (one regular expression instead of a compiled pattern per name per variable)."""
    exact = frozenset(p for p in patterns if not any(c in p for c in "*?["))
    globs = [p for p in patterns if p not in exact]
    if not globs:
        return exact, None
    regex = re.compile("|".join(f"(?:{translate(p)})" for p in globs))
    return exact, regex.match


def carried_env(env: Mapping[str, str], names: Iterable[str]) -> dict[str, str]:
    """The entries of ``env`` named in ``names``, sorted by name, values carried."""
    return {name: carried(env[name]) for name in sorted(set(names)) if name in env}
