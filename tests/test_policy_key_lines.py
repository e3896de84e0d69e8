"""A mistake in a policy file is reported at the line of the key that holds it: under a
``[[disable]]`` too, where every issue was reported at the entry's header line."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpolicy.errors import PolicyError
from kernelpolicy.policy import load_policies
from kernelpolicy.policy.locate import locate

FEATURE = """schema = "kernelpolicy.policy/v1"

[features."sampler.greedy"]
description = "Greedy sampling"
fallback = "torch"

[[features."sampler.greedy".candidates]]
impl = "aiter"

[[features."sampler.greedy".candidates]]
impl = "torch"
"""

DISABLES = """schema = "kernelpolicy.policy/v1"
[[disable]]
feature = "sampler.greedy"
impl = "aiter"
reason = "incident 4711"

[[disable]]
feature = "sampler.greedy"
impl = "torch"
reason = "incident 4712"
"""


def _with(old: str, new: str, text: str = DISABLES, count: int = 1) -> str:
    assert old in text
    return text.replace(old, new, count)


@pytest.mark.parametrize(
    ("text", "line", "key", "message"),
    [
        pytest.param(
            _with('reason = "incident 4711"', 'reasn = "incident 4711"'), 5, "disable.0.reasn",
            "unknown key; did you mean 'reason'?", id="misspelt-key-of-a-disable",
        ),
        pytest.param(
            _with('reason = "incident 4712"', 'reason = "incident 4712"\nwhy = "x"'), 11,
            "disable.1.why", "unknown key", id="unknown-key-of-the-second-disable",
        ),
        pytest.param(
            _with('reason = "incident 4711"', "reason = 4711"), 5, "disable.0.reason",
            "string", id="wrong-type-of-a-disable",
        ),
        pytest.param(
            _with('reason = "incident 4711"', 'reason = "x"\nrollout = { percent = 200 }'), 6,
            "disable.0.rollout.percent", "100", id="inline-table-of-a-disable",
        ),
        pytest.param(
            _with('reason = "incident 4711"', 'reason = "x"\nrollout.percent = 200'), 6,
            "disable.0.rollout.percent", "100", id="dotted-key-of-a-disable",
        ),
        pytest.param(
            _with('reason = "incident 4711"\n', ""), 2, "disable.0.reason",
            "required key is missing", id="a-missing-key-is-at-the-header",
        ),
        pytest.param(
            _with('impl = "torch"\n', 'impl = "torch"\nvendr = "amd"\n', FEATURE), 12,
            "candidates.1.vendr", "unknown key", id="unknown-key-of-a-candidate",
        ),
        pytest.param(
            _with('fallback = "torch"', 'fallback = "torch"\nfalback = "x"', FEATURE), 6,
            "falback", "unknown key", id="unknown-key-of-a-feature",
        ),
        pytest.param(
            _with('schema = "kernelpolicy.policy/v1"\n', 'schema = "kernelpolicy.policy/v1"\n\n'
                  'disabel = 1\n', FEATURE), 3, "disabel", "unknown key", id="top-level-key",
        ),
    ],
)  # fmt: skip
def test_a_mistake_is_at_its_keys_line(
    tmp_path: Path, text: str, line: int, key: str, message: str
) -> None:
    """One issue, at the line that sets the key (a missing key: its table's header)."""
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(PolicyError) as info:
        load_policies([path])
    (issue,) = info.value.issues
    assert (issue.line, issue.key) == (line, key), str(issue)
    assert message in issue.message
    assert str(issue).startswith(f"{path}:{line} ")


@pytest.mark.parametrize(
    ("loc", "line"),
    [
        pytest.param(("disable", 0), 2, id="first-disable-header"),
        pytest.param(("disable", 1), 7, id="second-disable-header"),
        pytest.param(("disable", 1, "reason"), 10, id="key-of-the-second-disable"),
        pytest.param(("disable", 0, "nothing"), 2, id="key-not-set-is-the-header"),
        pytest.param(("disable", 2, "reason"), None, id="no-such-disable"),
    ],
)
def test_locate_in_disables(loc: tuple[str | int, ...], line: int | None) -> None:
    """locate() finds a [[disable]] entry's header, and a key under it."""
    assert locate(DISABLES, loc) == line


def test_a_disable_is_still_sourced_at_its_header(tmp_path: Path) -> None:
    """explain's "disabled by policy (FILE:LINE)" names the entry, not one of its keys."""
    (tmp_path / "f.toml").write_text(FEATURE)
    (tmp_path / "p.toml").write_text(DISABLES.replace('impl = "torch"', 'impl = "aiter"'))
    policies = load_policies([tmp_path / "f.toml", tmp_path / "p.toml"])
    assert [d.source.line for d in policies.disables] == [2, 7]
