"""The user docs say "verify suite", as the CLI does (``kernelpolicy --help``: "run the verify
suite"), where they said "conformance" (first-day review, finding 15); tests/test_verify_wording.py
keeps the word out of the package."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORD = re.compile("conformance", re.IGNORECASE)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("README.md", id="readme"),
        pytest.param("docs/verify.md", id="verify-page"),
        pytest.param("docs/cli.md", id="cli-page"),
        pytest.param("docs/tutorial.md", id="tutorial"),
        pytest.param("docs/daemon-security.md", id="daemon-security"),
        pytest.param("docs/gpu.md", id="gpu-page"),
        pytest.param("deploy/kubernetes/daemonset.yaml", id="daemonset-comment"),
    ],
)
def test_user_docs_say_verify_suite(name: str) -> None:
    """The file names the suite by its command's word, never "conformance"."""
    text = (ROOT / name).read_text(encoding="utf-8")
    assert [m.start() for m in WORD.finditer(text)] == []


def test_verify_page_title_names_the_suite() -> None:
    """docs/verify.md's title is the verify suite's."""
    title = (ROOT / "docs/verify.md").read_text(encoding="utf-8").splitlines()[0]
    assert title == "# The verify suite: `kernelpolicy verify`"
