"""A schema mistake in a policy file says what was found and what was expected, in the project's
words, not pydantic's ("Input should be a valid list" named neither the value nor what a list of
what); a value that fits no member of a union is one mistake. Several mistakes are shown by the
CLI under a header line, one indented line each (the first was on the error line itself)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpolicy.cli import main
from kernelpolicy.errors import PolicyError
from kernelpolicy.policy.loader import load_policy_text

V1 = 'schema = "kernelpolicy.policy/v1"\n'
FEATURE = V1 + '[features.x]\ndescription = "d"\nfallback = "torch"\n'
CANDIDATE = FEATURE + '[[features.x.candidates]]\nimpl = "torch"\n'


@pytest.mark.parametrize(
    ("text", "said"),
    [
        pytest.param(
            'schema = "kernelpolicy.policy/v9"\n',
            'f.toml:1 schema: "kernelpolicy.policy/v9" is not a known schema; '
            'expected "kernelpolicy.policy/v1"',
            id="unknown-schema",
        ),
        pytest.param(
            "schema = 3\n",
            "f.toml:1 schema: the integer 3 is not a known schema; "
            'expected "kernelpolicy.policy/v1"',
            id="schema-not-a-string",
        ),
        pytest.param(
            FEATURE + "candidates = 3\n",
            "f.toml:5 [x] candidates: expected a list of candidate tables, got the integer 3",
            id="candidates-not-a-list",
        ),
        pytest.param(
            FEATURE + 'candidates = ["torch"]\n',
            'f.toml [x] candidates.0: expected a candidate table, got the string "torch"',
            id="candidate-not-a-table",
        ),
        pytest.param(
            FEATURE + "candidates = []\n",
            "f.toml:5 [x] candidates: expected at least 1 item, got an empty list",
            id="no-candidates",
        ),
        pytest.param(
            V1 + "features = 3\n",
            "f.toml:2 features: expected a table of features ([features.NAME]), got the integer 3",
            id="features-not-a-table",
        ),
        pytest.param(
            CANDIDATE + 'vendor = "intel"\n',
            'f.toml:7 [x] candidates.0.vendor: expected "nvidia" or "amd", got "intel"',
            id="literal-names-the-value",
        ),
        pytest.param(
            CANDIDATE + "notes = 1979-05-27\n",
            "f.toml:7 [x] candidates.0.notes: expected a string, got the date 1979-05-27",
            id="string-got-a-date",
        ),
        pytest.param(
            CANDIDATE + 'arch = "sm_90"\n',
            'f.toml:7 [x] candidates.0.arch: expected a list of architecture names such as '
            '["sm_90"], got the string "sm_90"',
            id="arch-not-a-list",
        ),
        pytest.param(
            FEATURE.replace('fallback = "torch"', 'fallback = "torch"\nin_process = 2')
            + '[[features.x.candidates]]\nimpl = "torch"\n',
            "f.toml:5 [x] in_process: expected true or false, got the integer 2",
            id="boolean",
        ),
        pytest.param(
            CANDIDATE + "min_compute_units = 0\n",
            "f.toml:7 [x] candidates.0.min_compute_units: expected at least 1, got the integer 0",
            id="bound",
        ),
        pytest.param(
            CANDIDATE + "libraries = { aiter = 3 }\n",
            "f.toml:7 [x] candidates.0.libraries.aiter: expected a string or a table such as "
            '{ version = ">=0.2", compare = "base" }, got the integer 3',
            id="union-is-one-mistake",
        ),
        pytest.param(
            CANDIDATE + 'libraries = { aiter = { version = ">=1", bogus = 1 } }\n',
            "f.toml:7 [x] candidates.0.libraries.aiter.bogus: unknown key; expected one of: "
            "version, compare",
            id="union-member-meant-is-the-one-said",
        ),
    ],
)  # fmt: skip
def test_a_schema_mistake_names_the_value_and_what_was_expected(text: str, said: str) -> None:
    with pytest.raises(PolicyError) as info:
        load_policy_text(text, "f.toml")
    assert [str(issue) for issue in info.value.issues if "description" not in str(issue)] == [said]


def test_several_problems_are_listed_under_a_header(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('schema = "kernelpolicy.policy/v9"\n[features.x]\ncandidates = 3\n')
    assert main(["explain", "--policies", str(bad), "sampler.greedy"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "kernelpolicy: error: 3 problems in 1 policy file:",
        f'  {bad}:1 schema: "kernelpolicy.policy/v9" is not a known schema; '
        'expected "kernelpolicy.policy/v1"',
        f"  {bad}:2 [x] description: required key is missing",
        f"  {bad}:3 [x] candidates: expected a list of candidate tables, got the integer 3",
    ]


def test_one_problem_stays_on_the_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('schema = "kernelpolicy.policy/v9"\n')
    assert main(["explain", "--policies", str(bad), "sampler.greedy"]) == 2
    assert capsys.readouterr().err == (
        f'kernelpolicy: error: {bad}:1 schema: "kernelpolicy.policy/v9" is not a known schema; '
        'expected "kernelpolicy.policy/v1"\n'
    )
