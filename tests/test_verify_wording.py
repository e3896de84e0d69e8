"""One word per concept since conformance/ was split (issue 28): "evidence" for the store the
engine reads (kernelpolicy/evidence/), "verify" for the suite that runs the kernels
(kernelpolicy/verify/, ``kernelpolicy verify``). The old word appears nowhere in the package's
files but where the allowlist says why."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "kernelpolicy"
WORD = re.compile("conformance", re.IGNORECASE)

CONTRACTS: dict[str, int] = {}
"""Package file -> occurrences of the word in names others depend on (metric names, public
error classes, gRPC fields, CLI options), kept as published. None holds it: the metric is
kernelpolicy_evidence_passed, the error class EvidenceError."""

ELSEWHERE: dict[str, int] = {}
"""Package file -> occurrences in prose of modules a change in flight owns (none left: the
evidence store, fleet/evidence.py and labels.py say verify and evidence too)."""


def test_the_old_word_is_gone_from_the_package() -> None:
    """Every file under kernelpolicy/ (code, policies, fixtures, protos) is read; the counts
    must match the allowlists exactly, so a file that loses the word loses its row too."""
    found: dict[str, int] = {}
    for path in sorted(PACKAGE.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # a binary fixture holds no prose
            continue
        count = len(WORD.findall(text))
        if count:
            found[path.relative_to(PACKAGE).as_posix()] = count
    assert found == {**CONTRACTS, **ELSEWHERE}
