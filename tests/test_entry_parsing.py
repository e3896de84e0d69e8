"""An entry (``module:function``) is read by one parser, ``policy.entries.parse_entry``: a bad one
is refused in the same words by a policy, by ``verify --entry`` and by ``check``'s search."""

from __future__ import annotations

import re

import pytest

from kernelpolicy.cli import main
from kernelpolicy.errors import PolicyError
from kernelpolicy.policy import load_policy_text
from kernelpolicy.policy.entries import Entry, entry_problem, parse_entry
from tests.cli_error_helpers import needs_torch

POLICY = """
schema = "kernelpolicy.policy/v1"
[features."demo.sampler"]
description = "a candidate with a bad entry"
[[features."demo.sampler".candidates]]
impl = "planted"
entry = {entry!r}
"""
BAD = [
    pytest.param(":", id="colon-only"),
    pytest.param("a:", id="no-function"),
    pytest.param(":b", id="no-module"),
    pytest.param("a:b:c", id="two-colons"),
    pytest.param("nocolon", id="no-colon"),
    pytest.param("a.b:c.d", id="dotted-function"),
]


def _expected(entry: str) -> str:
    return f"entry {entry!r}: expected 'package.module:function'"


@pytest.mark.parametrize("entry", BAD)
def test_a_bad_entry_is_refused_alike_by_a_policy(entry: str) -> None:
    """Loading a policy names the file, the feature and the key, then the parser's words."""
    with pytest.raises(PolicyError) as refused:
        load_policy_text(POLICY.format(entry=entry))
    assert str(refused.value).endswith(_expected(entry)), refused.value
    with pytest.raises(ValueError, match=f"^{re.escape(_expected(entry))}$"):
        parse_entry(entry)
    assert entry_problem(entry) == _expected(entry)


@needs_torch
@pytest.mark.parametrize("entry", BAD)
def test_a_bad_entry_is_refused_alike_by_verify(
    entry: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``verify --entry`` says what a policy says, one line, exit 2 (before: its own check
    took 'a:b:c' for module 'a' and function 'b:c', and said the module was not installed)."""
    assert main(["verify", "--feature", "sampler.greedy", "--entry", entry]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].endswith(_expected(entry)), lines[0]


@pytest.mark.parametrize(
    ("entry", "parts"),
    [
        pytest.param("json:loads", Entry("json", "loads"), id="top-level"),
        pytest.param(
            "kernelpolicy.kernels.torch_impl:greedy",
            Entry("kernelpolicy.kernels.torch_impl", "greedy"),
            id="dotted-module",
        ),
        pytest.param("_m:_f", Entry("_m", "_f"), id="underscores"),
    ],
)
def test_a_good_entry_is_its_module_and_function(entry: str, parts: Entry) -> None:
    """The module (dotted) before the one colon, the function's name after it."""
    assert parse_entry(entry) == parts
