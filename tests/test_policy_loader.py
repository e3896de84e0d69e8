"""Policy files: every mistake reported with file, line, feature and key; never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpolicy.errors import PolicyError
from kernelpolicy.policy import load_policies
from tests.helpers import ROOT

GOOD = """schema = "kernelpolicy.policy/v1"

[features."sampler.greedy"]
description = "Greedy sampling"
fallback = "torch"
context = { vocab_size = "int" }

[[features."sampler.greedy".candidates]]
impl = "aiter"
vendor = "amd"
libraries = { "amd-aiter" = ">=0.1.13" }
when = "vocab_size >= 16384"

[[features."sampler.greedy".candidates]]
impl = "torch"
"""


def write(tmp_path: Path, text: str, name: str = "p.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_good_policy_loads(tmp_path: Path) -> None:
    """The reference document loads."""
    policies = load_policies([write(tmp_path, GOOD)])
    assert list(policies.features) == ["sampler.greedy"]
    assert policies.library_names == {"amd-aiter"}


@pytest.mark.parametrize(
    ("old", "new", "line", "feature", "key", "message"),
    [
        pytest.param(
            'impl = "torch"\n',
            'impl = "torch"\nfoo = 1\n',
            16,
            "sampler.greedy",
            "candidates.1.foo",
            "unknown key",
            id="unknown-key",
        ),
        pytest.param(
            'impl = "torch"\n',
            'impl = "torch"\nwhn = "true"\n',
            16,
            "sampler.greedy",
            "candidates.1.whn",
            "unknown key; did you mean 'when'? (the policy language: docs/policies.md in "
            "kernelpolicy's source tree)",
            id="misspelt-key",
        ),
        pytest.param(
            'impl = "torch"\n',
            'impl = "torch"\nrollout = { percent = 5, sault = "a" }\n',
            16,
            "sampler.greedy",
            "candidates.1.rollout.sault",
            "unknown key; did you mean 'salt'?",
            id="misspelt-nested-key",
        ),
        pytest.param(
            'impl = "torch"\n',
            'impl = "torch"\nrollout = { percent = 5, zzz = "a" }\n',
            16,
            "sampler.greedy",
            "candidates.1.rollout.zzz",
            "unknown key; expected one of: percent, salt",
            id="unknown-key-with-nothing-close",
        ),
        pytest.param(
            '">=0.1.13"',
            '"=>0.1.13"',
            11,
            "sampler.greedy",
            "candidates.0.libraries",
            "amd-aiter: invalid version specifier '=>0.1.13'",
            id="bad-specifier",
        ),
        pytest.param(
            '"vocab_size >= 16384"',
            '"vocab_size >="',
            12,
            "sampler.greedy",
            "candidates.0.when",
            "CEL syntax error",
            id="bad-cel-syntax",
        ),
        pytest.param(
            '"vocab_size >= 16384"',
            '"vocab >= 16384"',
            12,
            "sampler.greedy",
            "candidates.0.when",
            "undeclared variable 'vocab'",
            id="cel-undeclared",
        ),
        pytest.param(
            '"vocab_size >= 16384"',
            '"vocab_size >= \\"x\\""',
            12,
            "sampler.greedy",
            "candidates.0.when",
            "does not type-check",
            id="cel-type-error",
        ),
        pytest.param(
            '"vocab_size >= 16384"',
            '"vocab_size + 1"',
            12,
            "sampler.greedy",
            "candidates.0.when",
            "must be a boolean",
            id="cel-not-boolean",
        ),
        pytest.param(
            'impl = "aiter"',
            'impl = "cutlass"',
            9,
            "sampler.greedy",
            "candidates.0.impl",
            "unknown implementation 'cutlass'",
            id="unknown-impl",
        ),
        pytest.param(
            'vendor = "amd"',
            'vendor = "intel"',
            10,
            "sampler.greedy",
            "candidates.0.vendor",
            'expected "nvidia" or "amd", got "intel"',
            id="bad-vendor",
        ),
        pytest.param(
            'fallback = "torch"',
            'fallback = "aiter"',
            3,
            "sampler.greedy",
            None,
            "fallback 'aiter' has requirements",
            id="conditional-fallback",
        ),
        pytest.param(
            'fallback = "torch"',
            'fallback = "triton"',
            3,
            "sampler.greedy",
            None,
            "fallback 'triton' is not one of the candidates",
            id="missing-fallback",
        ),
        pytest.param(
            'fallback = "torch"\n',
            "",
            3,
            "sampler.greedy",
            None,
            "needs 'fallback'",
            id="no-fallback-not-required",
        ),
        pytest.param(
            'impl = "torch"',
            'impl = "aiter"',
            3,
            "sampler.greedy",
            None,
            "implementation 'aiter' listed twice",
            id="duplicate-impl",
        ),
        pytest.param(
            'vendor = "amd"',
            'vendor = "amd"\narch = ["gfx9x"]',
            11,
            "sampler.greedy",
            "candidates.0.arch",
            "arch 'gfx9x'",
            id="bad-arch",
        ),
        pytest.param(
            'context = { vocab_size = "int" }',
            'context = { vocab_size = "long" }',
            6,
            "sampler.greedy",
            "context.vocab_size",
            'expected "bool", "int", "double" or "string", got "long"',
            id="bad-context-type",
        ),
        pytest.param(
            'context = { vocab_size = "int" }',
            'context = { vocab_size = "int", class = "int" }',
            3,
            "sampler.greedy",
            None,
            "not a Python keyword",
            id="keyword-context",
        ),
        pytest.param(
            'impl = "aiter"',
            'impl = "aiter"\nswitches = [{ env = "lower" }]',
            10,
            "sampler.greedy",
            "candidates.0.switches.0.env",
            "not an environment variable name",
            id="bad-env-name",
        ),
    ],
)
def test_mistakes_are_located(
    old: str, new: str, line: int, feature: str, key: str | None, message: str, tmp_path: Path
) -> None:
    """One mistake, one issue: file, line, feature, key and what was expected."""
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(PolicyError) as info:
        load_policies([path])
    (issue,) = info.value.issues
    assert issue.file == str(path)
    assert message in issue.message
    assert (issue.line, issue.feature, issue.key) == (line, feature, key)
    assert str(issue).startswith(f"{path}:{line} [{feature}]")


def test_bad_toml_has_the_line(tmp_path: Path) -> None:
    """A TOML syntax error gives the line tomllib reports."""
    path = write(tmp_path, GOOD.replace('impl = "torch"', 'impl = "torch'))
    with pytest.raises(PolicyError) as info:
        load_policies([path])
    (issue,) = info.value.issues
    assert issue.line == 15
    assert issue.message.startswith("not valid TOML")


def test_missing_schema(tmp_path: Path) -> None:
    """A file without the schema line says how to fix it."""
    path = write(tmp_path, GOOD.replace('schema = "kernelpolicy.policy/v1"\n', ""))
    with pytest.raises(PolicyError, match=r"missing 'schema = \"kernelpolicy.policy/v1\"'"):
        load_policies([path])


def test_every_file_is_checked(tmp_path: Path) -> None:
    """Mistakes in several files are all reported at once."""
    a = write(tmp_path, GOOD.replace('">=0.1.13"', '"bad"'), "a.toml")
    b = write(tmp_path, GOOD.replace('impl = "torch"\n', 'impl = "torch"\nx = 1\n'), "b.toml")
    with pytest.raises(PolicyError) as info:
        load_policies([a, b])
    assert [i.file for i in info.value.issues] == [str(a), str(b)]


def test_feature_defined_twice(tmp_path: Path) -> None:
    """A feature may live in one file only."""
    a = write(tmp_path, GOOD, "a.toml")
    b = write(tmp_path, GOOD, "b.toml")
    with pytest.raises(
        PolicyError, match=r"b\.toml:3 \[sampler\.greedy\]: feature also defined in .*a\.toml:3"
    ):
        load_policies([a, b])


def test_directory_loads_toml_in_name_order(tmp_path: Path) -> None:
    """A directory means its *.toml files, sorted; other files are ignored."""
    write(tmp_path, GOOD, "20-greedy.toml")
    (tmp_path / "README.md").write_text("not policy")
    policies = load_policies([tmp_path])
    assert [Path(f).name for f in policies.files] == ["20-greedy.toml"]


def test_operator_disable_file(tmp_path: Path) -> None:
    """An override file can switch one implementation off, and must name a real one."""
    base = write(tmp_path, GOOD, "10-base.toml")
    override = write(
        tmp_path,
        'schema = "kernelpolicy.policy/v1"\n\n[[disable]]\n'
        'feature = "sampler.greedy"\nimpl = "aiter"\n'
        'reason = "incident 4711: bad tokens on node pool B"\n',
        "90-ops.toml",
    )
    policies = load_policies([base, override])
    assert policies.disables[0].spec.reason.startswith("incident 4711")
    override.write_text(override.read_text().replace('impl = "aiter"', 'impl = "aitr"'))
    with pytest.raises(
        PolicyError,
        match=r"90-ops\.toml:3 \[sampler\.greedy\] disable: disables sampler\.greedy/aitr, "
        r"which is not defined \(known: aiter, torch\)",
    ):
        load_policies([base, override])


def test_missing_file(tmp_path: Path) -> None:
    """A path that does not exist is one clear issue."""
    with pytest.raises(PolicyError, match="no such policy file"):
        load_policies([tmp_path / "nope.toml"])


def test_bundled_pack_loads() -> None:
    """The shipped pack is valid and defines the DESIGN.md features, and the engine-only ones
    the engine bridge tells vLLM and SGLang about."""
    policies = load_policies([Path(__file__).parent.parent / "policies"])
    assert set(policies.features) >= {
        "sampler.top_k_top_p", "sampler.greedy", "allreduce_rmsnorm", "mhc",
        "sparse_attn_indexer", "topk_per_row", "attention.backend", "attention.mla",
        "moe.experts", "fp8.gemm", "rocm.aiter.rmsnorm", "rocm.aiter.fp4bmm",
    }  # fmt: skip
    assert len(policies.features) >= 15
    assert set(policies.gates) == {"allreduce_rmsnorm.one_stage"}


@pytest.mark.parametrize(
    ("text", "said"),
    [
        pytest.param(
            'schema = "kernelpolicy.policy/v1"\n[features."f"]\ndescripton = "x"\n'
            'fallback = "torch"\n[[features."f".candidates]]\nimpl = "torch"\nvendr = "amd"\n',
            [(3, "descripton: unknown key; did you mean 'description'? (a required key; "),
             (7, "vendr: unknown key; did you mean 'vendor'")],
            id="misspelt-required-key-said-once",
        ),
        pytest.param(
            'schema = "kernelpolicy.policy/v1"\n[features."f"]\nfallback = "torch"\n'
            '[[features."f".candidates]]\nimpl = "torch"\n',
            [(2, "description: required key is missing")],
            id="missing-required-key",
        ),
        pytest.param(
            'schema = "kernelpolicy.policy/v1"\n[features."f"]\ndescription = "x"\n'
            'fallback = "torch"\n[[features."f".candidates]]\nimpl = "torch"\n'
            '[[features."f".candidates.known_issues]]\nlibrary = "torch"\nversion = ">=2.0"\n',
            [(7, "known_issues.0.reason: required key is missing"),
             (9, "version: unknown key; did you mean 'versions'")],
            id="a-misspelt-optional-key-hides-no-missing-one",
        ),
        pytest.param(
            (ROOT / "docs/check/bad.toml").read_text(),
            [(9, "unknown implementation 'flashinfr'"), (14, "undeclared variable 'has_top_p'")],
            id="in-line-order-across-checks",
        ),
    ],
)  # fmt: skip
def test_each_mistake_once_in_line_order(
    tmp_path: Path, text: str, said: list[tuple[int, str]]
) -> None:
    """A misspelt required key is one issue at the misspelling (not also "missing"), and one
    file's issues come in the order of its lines, whichever check found them."""
    with pytest.raises(PolicyError) as error:
        load_policies([write(tmp_path, text)])
    issues = error.value.issues
    assert [issue.line for issue in issues] == [line for line, _ in said]
    assert all(part in str(issue) for issue, (_, part) in zip(issues, said, strict=True))


def test_issues_of_the_whole_set_come_in_line_order(tmp_path: Path) -> None:
    """Issues found when the files are put together (a feature defined twice, a gate that
    requires what nobody defines) come in file and line order, as one file's do."""
    a = write(tmp_path, GOOD, "a.toml")
    gate = (
        'schema = "kernelpolicy.policy/v1"\n'
        '[gates."g"]\ndescription = "x"\nrequires = { feature = "nope", impl = "x" }\n'
        'rule = "true"\n'
    )
    b = write(tmp_path, gate + GOOD.removeprefix('schema = "kernelpolicy.policy/v1"\n'), "b.toml")
    with pytest.raises(PolicyError) as info:
        load_policies([a, b])
    found = [(Path(i.file).name, i.line) for i in info.value.issues]
    assert found == sorted(found)
    assert len(found) == 2
