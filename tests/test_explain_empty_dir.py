"""``explain`` says that a policy directory holding no policy file adds nothing, in ``check``'s
words (review: ``explain --policies +DIR`` with DIR empty, an empty ConfigMap, resolved the
bundled pack alone and said nothing of DIR, where ``check`` noted it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelpolicy.cli import main
from kernelpolicy.settings import bundled_policy_dir

NOTE = "kernelpolicy: note: {}: a directory with no *.toml files; it adds no policies\n"
DISABLE = (
    'schema = "kernelpolicy.policy/v1"\n[[disable]]\nfeature = "sampler.greedy"\n'
    'impl = "aiter"\nreason = "the test\'s own"\n'
)


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, str]:
    """``d`` and ``d2``, directories with a file that is no policy file and nothing else;
    ``full``, one with a policy file; ``pack``, the bundled pack."""
    made = {"pack": str(bundled_policy_dir())}
    for name, files in (("d", {"README.txt": "x\n"}), ("d2", {}), ("full", {"x.toml": DISABLE})):
        directory = tmp_path / name
        directory.mkdir()
        for file, text in files.items():
            (directory / file).write_text(text)
        made[name] = str(directory)
    return made


@pytest.mark.parametrize(
    ("argv", "env", "noted"),
    [
        pytest.param(["--policies", "+{d}"], None, ["d"], id="plus-dir-option"),
        pytest.param([], "+{d}", ["d"], id="plus-dir-variable"),
        pytest.param(["--env", "KERNELPOLICY_POLICY_PATHS=+{d}"], None, ["d"], id="plus-dir-env"),
        pytest.param(["--policies", "{pack}", "--policies", "{d}"], None, ["d"],
                     id="beside-the-pack"),
        pytest.param(["--json", "--policies", "+{d}"], None, ["d"], id="json-stays-json"),
        pytest.param(["--policies", "+{d}", "--policies", "+{d2}"], None, ["d", "d2"],
                     id="each-named"),
        pytest.param(["--policies", "+{full}", "--policies", "+{d}"], None, ["d"],
                     id="only-the-empty-one"),
        pytest.param(["--policies", "+{full}"], None, [], id="no-empty-directory"),
        pytest.param([], None, [], id="bundled-pack-alone"),
    ],
)  # fmt: skip
def test_explain_notes_a_directory_that_adds_nothing(
    argv: list[str],
    env: str | None,
    noted: list[str],
    dirs: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each empty directory among the policy paths (from --policies, the variable or --env) is
    one note on stderr; the decisions are shown as before, on stdout (JSON stays JSON)."""
    monkeypatch.delenv("KERNELPOLICY_POLICY_PATHS", raising=False)
    if env is not None:
        monkeypatch.setenv("KERNELPOLICY_POLICY_PATHS", env.format(**dirs))
    assert main(["explain", "sampler.greedy", *(arg.format(**dirs) for arg in argv)]) == 0
    out, err = capsys.readouterr()
    said = [line for line in err.splitlines(keepends=True) if "adds no policies" in line]
    assert said == [NOTE.format(dirs[name]) for name in noted]
    if "--json" in argv:
        assert "sampler.greedy" in json.loads(out)["decisions"]
    else:
        assert "sampler.greedy" in out
