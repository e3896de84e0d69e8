"""Every command takes this machine's own settings one way (``cli.common.local_settings``): the
policy paths, the trust opt-out and the caches come from this process's environment with each
``--env K=V``, never from a platform snapshot's recorded environment, and the policies are
loaded by ``inputs.load_policies_for`` with them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernelpolicy.cli import main
from kernelpolicy.settings import bundled_policy_dir
from tests.helpers import FIXTURES

H100 = str(FIXTURES / "h100-sxm.json")
MISSING = "/nonexistent-kernelpolicy-policies"
PATHS = "KERNELPOLICY_POLICY_PATHS"
SET_MISSING = ("--env", f"{PATHS}={MISSING}")
PACK = str(bundled_policy_dir())
OPT_OUT = "KERNELPOLICY_ALLOW_UNTRUSTED_FILES"
SERVE = ["serve", "--quiet", "--no-watch", "--listen", "127.0.0.1:0"]  # refused before it binds


def _run(
    argv: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> tuple[int, str]:  # fmt: skip
    """``main(argv)`` with ``env`` set (and no policy paths or trust opt-out besides): its exit
    status, and stderr then stdout (check reports its findings on stdout)."""
    for name in ("KERNELPOLICY_POLICY_PATHS", OPT_OUT):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code = main(argv)
    out, err = capsys.readouterr()
    return code, err + out


@pytest.mark.parametrize(
    ("argv", "env", "origin"),
    [
        pytest.param(["labels", "--platform", H100], {"KERNELPOLICY_POLICY_PATHS": MISSING},
                     "KERNELPOLICY_POLICY_PATHS", id="labels-snapshot-process-env"),
        pytest.param(["labels", "--platform", H100, *SET_MISSING],
                     {}, "KERNELPOLICY_POLICY_PATHS", id="labels-snapshot-env-option"),
        pytest.param(["labels"], {"KERNELPOLICY_POLICY_PATHS": MISSING},
                     "KERNELPOLICY_POLICY_PATHS", id="labels-probe-process-env"),
        pytest.param(["labels", "--platform", H100, "--policies", MISSING], {}, "--policies",
                     id="labels-policies-option"),
        pytest.param(["explain", "--platform", H100], {"KERNELPOLICY_POLICY_PATHS": MISSING},
                     "KERNELPOLICY_POLICY_PATHS", id="explain-snapshot-process-env"),
        pytest.param(["explain", "--platform", H100, *SET_MISSING],
                     {}, "KERNELPOLICY_POLICY_PATHS", id="explain-snapshot-env-option"),
        pytest.param(["matrix"], {"KERNELPOLICY_POLICY_PATHS": MISSING},
                     "KERNELPOLICY_POLICY_PATHS", id="matrix-process-env"),
        pytest.param(["diff", "--against", PACK], {"KERNELPOLICY_POLICY_PATHS": MISSING},
                     "KERNELPOLICY_POLICY_PATHS", id="diff-process-env"),
        pytest.param([*SERVE, "--policies", MISSING], {}, "--policies",
                     id="serve-policies-option"),
        pytest.param(SERVE, {"KERNELPOLICY_POLICY_PATHS": MISSING}, "KERNELPOLICY_POLICY_PATHS",
                     id="serve-process-env"),
        pytest.param([*SERVE, *SET_MISSING], {}, "KERNELPOLICY_POLICY_PATHS",
                     id="serve-env-option"),
    ],
)  # fmt: skip
def test_a_missing_policy_path_names_where_it_came_from(
    argv: list[str], env: dict[str, str], origin: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """Each command reads the same policy paths for the same input, snapshot or not, and says
    which option or variable named the missing one (labels with --platform used to answer with
    the bundled pack whatever KERNELPOLICY_POLICY_PATHS said; serve named neither)."""
    code, err = _run(argv, env, monkeypatch, capsys)
    assert code == 2
    assert f"{MISSING}: no such policy file or directory (from {origin})" in err


@pytest.fixture
def shared_pack(tmp_path: Path) -> Path:
    """A copy of the bundled pack in a directory its group can write (a pack shared on purpose)."""
    pack = tmp_path / "shared"
    shutil.copytree(bundled_policy_dir(), pack)
    pack.chmod(0o775)
    return pack


def _with(command: str, pack: Path, *extra: str) -> list[str]:
    """``command``'s argv that loads the policies of ``pack``, with ``extra`` options."""
    if command == "check":
        return ["check", str(pack), *extra]
    if command == "diff":
        return ["diff", "--policies", str(pack), "--against", str(pack), *extra]
    answer = ["--platform", H100] if command in ("explain", "labels", "env") else []
    engine = ["--engine", "vllm"] if command == "env" else []
    return [command, *engine, *answer, "--policies", str(pack), *extra]


ENV_OPTION = ("--env", f"{OPT_OUT}=1")


@pytest.mark.parametrize(
    ("command", "extra", "env", "expected"),
    [
        pytest.param("explain", (), {}, 2, id="explain-refused-without-opt-out"),
        pytest.param("explain", (), {OPT_OUT: "1"}, 0, id="explain-process-env"),
        pytest.param("explain", ENV_OPTION, {}, 0, id="explain-env-option"),
        pytest.param("env", ENV_OPTION, {}, 0, id="env-env-option"),
        pytest.param("labels", (), {}, 2, id="labels-refused-without-opt-out"),
        pytest.param("labels", ENV_OPTION, {}, 0, id="labels-env-option"),
        pytest.param("matrix", ENV_OPTION, {}, 0, id="matrix-env-option"),
        pytest.param("diff", (), {OPT_OUT: "1"}, 0, id="diff-process-env"),
        pytest.param("diff", (), {}, 2, id="diff-refused-without-opt-out"),
        pytest.param("check", (), {OPT_OUT: "1"}, 0, id="check-process-env"),
        pytest.param("check", (), {}, 1, id="check-finds-it-without-opt-out"),
    ],
)  # fmt: skip
def test_the_trust_opt_out_counts_wherever_the_user_sets_it(
    command: str, extra: tuple[str, ...], env: dict[str, str], expected: int, shared_pack: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """KERNELPOLICY_ALLOW_UNTRUSTED_FILES=1 in this process's environment or in --env accepts a
    group-writable policy directory, as it accepts the evidence store (--env used to count for
    the store only, and the refusal told the user to set the variable they had just set)."""
    code, err = _run(_with(command, shared_pack, *extra), env, monkeypatch, capsys)
    assert code == expected, err
    refused = "writable by its group (mode 0775" in err
    assert refused is (expected != 0)


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["check"], id="check"),
        pytest.param(["explain", "--platform", H100], id="explain"),
        pytest.param(["matrix"], id="matrix"),
        pytest.param(["diff", "--against", PACK], id="diff"),
    ],
)  # fmt: skip
@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        pytest.param("KERNELPOLICY_LOG_FORMAT", "xx",
                     "KERNELPOLICY_LOG_FORMAT='xx': expected one of", id="log-format"),
        pytest.param("KERNELPOLICY_PACK_CACHE", "maybe",
                     "KERNELPOLICY_PACK_CACHE='maybe' is not a boolean", id="pack-cache"),
        pytest.param(OPT_OUT, "sure", f"{OPT_OUT}='sure' is not a boolean", id="trust-opt-out"),
    ],
)  # fmt: skip
def test_a_bad_setting_is_the_same_error_in_every_command(
    argv: list[str], name: str, value: str, message: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """The commands read their settings one way: a bad KERNELPOLICY_* value is exit 2 naming
    the variable in each (check used to read the trust opt-out alone, and pass the rest)."""
    code, err = _run(argv, {name: value}, monkeypatch, capsys)
    assert code == 2
    assert message in err


@pytest.mark.parametrize(
    ("bundled", "origin"),
    [
        pytest.param(True, "bundled pack", id="the-bundled-default"),
        pytest.param(False, "KERNELPOLICY_POLICY_PATHS", id="the-variable"),
    ],
)  # fmt: skip
def test_load_policies_for_names_where_the_settings_paths_came_from(
    bundled: bool, origin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """inputs.load_policies_for(settings) blames the variable only when one is set: a missing
    bundled pack (a broken install) used to be blamed on KERNELPOLICY_POLICY_PATHS."""
    from kernelpolicy import inputs
    from kernelpolicy.errors import SettingsError
    from kernelpolicy.settings import Settings

    missing = tmp_path / "missing"
    if bundled:
        monkeypatch.setattr(inputs, "bundled_policy_dir", lambda: missing)
    with pytest.raises(SettingsError, match=rf"{missing}: no such .*\(from {origin}\)"):
        inputs.load_policies_for(Settings(policy_paths=(missing,)))


@pytest.mark.parametrize(
    ("argv", "where"),
    [
        pytest.param([], "process", id="process-env"),
        pytest.param(["--env", "KERNELPOLICY_CACHE_DIR={option}"], "option", id="env-option"),
    ],
)  # fmt: skip
def test_warm_takes_its_cache_dir_as_every_command_does(
    argv: list[str], where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """warm's kernel cache is under the cache directory of local_settings: this process's
    KERNELPOLICY_CACHE_DIR, or --env's (warm used to read os.environ alone, so --env set the
    policies' settings but not the cache's)."""
    import json

    monkeypatch.setenv("KERNELPOLICY_CACHE_DIR", str(tmp_path / "process"))
    extra = [a.format(option=tmp_path / "option") for a in argv]
    code, out = _run(["warm", "--platform", H100, "--json", "--device", "none", *extra], {},
                     monkeypatch, capsys)  # fmt: skip
    assert code == 0, out
    assert Path(json.loads(out)["cache"]).is_relative_to(tmp_path / where)
