"""What README.md and docs/ show is true: examples run, transcripts and tables are current."""

from __future__ import annotations

import doctest
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs_helpers import gen_docs
from tests.helpers import ROOT

PAGES = gen_docs.doc_files()
_PYTHON = re.compile(r"```python\n(.*?)```", re.S)
_FILE = re.compile(r"<!-- file: (\S+) -->\n```\w*\n(.*?)```", re.S)


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


PYTHON_BLOCKS = [
    pytest.param(block, id=f"{_name(page)}#{index}")
    for page in PAGES
    for index, block in enumerate(_PYTHON.findall(page.read_text()))
]
TRANSCRIPTS = [
    pytest.param(block, id=f"{_name(page)}:{block.steps[0][0][:60]}")
    for page in PAGES
    for block in gen_docs.blocks(page)
]
FILES = [
    pytest.param(path, text, id=path)
    for page in PAGES
    for path, text in _FILE.findall(page.read_text())
]


@pytest.mark.parametrize("block", PYTHON_BLOCKS)
def test_python_example_runs(block: str) -> None:
    """Each ```python block runs in a fresh interpreter from the repository root; >>> blocks
    must print what they show."""
    if block.lstrip().startswith(">>>"):
        test = doctest.DocTestParser().get_doctest(block, {}, "docs", "docs", 0)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        runner.run(test)
        assert runner.failures == 0
        return
    # A fresh interpreter per example: some import the OpenFeature flagd provider, whose
    # protobuf messages may not share a process with the daemon's.
    result = subprocess.run(
        [sys.executable, "-c", block], cwd=ROOT, check=False, capture_output=True, text=True,
        timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("block", TRANSCRIPTS)
def test_transcript_is_current(block: object) -> None:
    """Each CLI transcript is what its commands print now (python scripts/gen_docs.py)."""
    problems = gen_docs.stale(block)
    assert not problems, "\n".join(problems) + "\n(run: python scripts/gen_docs.py)"


@pytest.mark.parametrize(("path", "text"), FILES)
def test_shown_file_is_the_file(path: str, text: str) -> None:
    """A file shown in the docs is the file the tests run."""
    assert (ROOT / path).read_text() == text


def test_generated_tables_are_current() -> None:
    """Generated tables (built-in implementation names) match the code."""
    stale = [_name(p) for p in PAGES if gen_docs.regenerate(p.read_text()) != p.read_text()]
    assert not stale, f"stale generated tables in {stale} (run: python scripts/gen_docs.py)"


def test_tables_found() -> None:
    """The checks above have something to check (a broken pattern would make them vacuous)."""
    assert len(PYTHON_BLOCKS) >= 5
    assert len(TRANSCRIPTS) >= 8
    assert len(FILES) >= 3
