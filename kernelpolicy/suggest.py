""" "Did you mean": the close names to a mistyped one, as git and kubectl offer them.

Only error paths call this (an unknown command, option, feature or implementation); nothing on
a hot path computes a suggestion. Imports only :mod:`difflib`, when a suggestion is computed
(modules on a worker's start path import this one).
"""

from __future__ import annotations

from collections.abc import Iterable

CUTOFF = 0.6
"""How alike a name must be to be offered (difflib's ratio; its own default)."""


def close_names(word: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """The names among ``choices`` closest to ``word``, best first (at most ``n``).

    A choice that starts with ``word`` or ends with it (``top_k_top_p`` for
    ``sampler.top_k_top_p``) counts as close even when difflib's ratio is low.
    """
    import difflib  # an error path: not on a worker's start

    names = [c for c in dict.fromkeys(choices) if c != word]
    found = difflib.get_close_matches(word, names, n=n, cutoff=CUTOFF)
    if len(word) >= 3:
        lowered = word.lower()
        affixed = [c for c in names if c.lower().endswith(lowered) or c.lower().startswith(lowered)]
        found += [c for c in affixed if c not in found]
    return found[:n]


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` (or ``'x' or 'y'``), or ``""`` when nothing is close."""
    found = close_names(word, choices)
    if not found:
        return ""
    return "; did you mean " + " or ".join(repr(f) for f in found) + "?"
