"""What the bridge-audit tests share: a :class:`Case` of what one engine release must be told
on one fixture, how it is told (:func:`told`) and the one check of it (:func:`assert_told`),
used by every audit's table (tests/test_bridge_audit_releases*.py); and the real ``kernelpolicy
env --json`` run in this process on the seventh audit's machines (:func:`env_json`)."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelpolicy import Platform
from kernelpolicy.bridge import MODEL_KINDS, EngineSettings, Status, engine_settings
from tests.helpers import fixture, resolve_on, with_device, with_libraries


@dataclass(frozen=True)
class Case:
    """What release ``version`` of ``engine`` must be told about ``feature`` on ``fixture``."""

    fixture: str
    engine: str
    version: str
    model_kind: str = "mha"
    env: dict[str, str] = field(default_factory=dict)
    feature: str = ""
    status: Status = Status.TOLD
    absent: tuple[str, ...] = ()  # variables or flags that must not be sent
    present: dict[str, str] = field(default_factory=dict)  # variables sent with these values
    flags: tuple[str, ...] = ()  # a run of words the command line must carry
    warning: str = ""  # a fragment of the feature's warning
    error: str = ""  # a fragment of the errors that stop the engine
    ok: bool = True  # the engine may start


def told(case: Case) -> EngineSettings:
    """What the bridge tells the case's release, on its fixture resolved with its ``env``."""
    assert case.model_kind in MODEL_KINDS, f"{case.model_kind}: not a --model-kind"
    platform = resolve_on(case.fixture, **case.env)
    return engine_settings(
        platform, case.engine, case.env, engine_version=case.version, model_kind=case.model_kind
    )


AITER = {"VLLM_ROCM_USE_AITER": "1"}
"""The environment that turns aiter on for vLLM on ROCm."""


def assert_told(case: Case) -> None:
    """The release is told what ``case`` says: the feature's status, whether the engine may
    start, the variables and flags sent and not sent, the warning and the error."""
    assert_settings(case, told(case))


def assert_settings(case: Case, settings: EngineSettings) -> None:
    """``settings`` are what ``case`` says its release must be told (:func:`assert_told`)."""
    decision = settings.decisions[case.feature]
    assert decision.status is case.status, decision
    assert settings.ok is case.ok, settings.errors
    words = settings.flags
    for name in case.absent:
        assert name not in settings.env or name in case.env, settings.env
        assert name not in words, words
    for name, value in case.present.items():
        assert settings.env.get(name) == value, settings.env
    if case.flags:
        runs = [tuple(words[i : i + len(case.flags)]) for i in range(len(words))]
        assert case.flags in runs, words
    if case.warning:
        said = " ".join(w for f, w in settings.feature_warnings if f == case.feature)
        assert case.warning in said, said
    if case.error:
        assert case.error in " ".join(settings.errors), settings.errors


def told_with(case: Case, libraries: Mapping[str, str]) -> EngineSettings:
    """What the case's release is told on its fixture with these distributions installed as
    well, under the names a policy gives them (``deep_gemm``, ``flash_mla``)."""
    platform = fixture(case.fixture)
    platform = platform.replace(libraries={**platform.libraries, **libraries})
    return engine_settings(
        resolve_on(platform, **case.env), case.engine, case.env,
        engine_version=case.version, model_kind=case.model_kind,
    )  # fmt: skip


# The sixth audit's AMD machines (tests/test_bridge_audit6*.py).
PLATFORMS: dict[str, Callable[[], Platform]] = {
    "mi250x-aiter": lambda: with_libraries("mi250x", amd_aiter="0.1.13"),
    "mi300x-no-aiter": lambda: with_libraries("mi300x", amd_aiter=None),
    "rx9070xt": lambda: with_device("rx7900xtx", arch="gfx1201"),
    "rx9070xt-aiter": lambda: _with_aiter(with_device("rx7900xtx", arch="gfx1201")),
    "rx7900xtx-aiter": lambda: with_libraries("rx7900xtx", amd_aiter="0.1.13"),
}
"""The audit's machines that are no fixture: a fixture with aiter added or removed, or another
arch (the RX 9070 XT is gfx1201, RDNA4)."""


def _with_aiter(platform: Platform) -> Platform:
    changed: Platform = platform.replace(libraries={**platform.libraries, "amd-aiter": "0.1.13"})
    return changed


def told6(case: Case) -> EngineSettings:
    """What the case's release is told on its machine (a fixture or one of
    :data:`PLATFORMS`), resolved with its ``env``."""
    made = PLATFORMS.get(case.fixture)
    platform = made() if made is not None else fixture(case.fixture)
    return engine_settings(
        resolve_on(platform, **case.env), case.engine, case.env,
        engine_version=case.version, model_kind=case.model_kind,
    )  # fmt: skip


def assert_told6(case: Case) -> None:
    """The release is told what ``case`` says, on the case's machine."""
    assert_settings(case, told6(case))


# The seventh audit's NVIDIA machines (tests/test_bridge_audit7*.py): fixtures with another
# FlashInfer, or another GPU of the fixture's family.
MACHINES7: dict[str, Callable[[], Platform]] = {
    "h100-fi-0.2.10": lambda: with_libraries("h100-sxm", flashinfer_python="0.2.10"),
    "h100-fi-0.2.14.post1": lambda: with_libraries("h100-sxm", flashinfer_python="0.2.14.post1"),
    "h100-fi-0.2.5": lambda: with_libraries("h100-sxm", flashinfer_python="0.2.5"),
    "h100-fi-none": lambda: with_libraries("h100-sxm", flashinfer_python=None),
    "a100-fi-0.7.2.post1": lambda: with_libraries("a100", flashinfer_python="0.7.2.post1"),
    "b300": lambda: with_device("b200", arch="sm_103", capability="10.3"),
    "rtx5090": lambda: with_device("h200", arch="sm_120", capability="12.0"),
}
"""The audit's machines that are no fixture (a B300 is sm_103, capability 10.3; an RTX 5090
sm_120); the others are fixtures by name."""


@dataclass(frozen=True)
class Said:
    """What ``kernelpolicy env --json`` said: its exit code, the settings it printed (None
    where it printed none) and its stderr (warnings, errors)."""

    code: int
    settings: dict[str, Any] | None
    stderr: str

    def decision(self, feature: str) -> dict[str, Any]:
        assert self.settings is not None, self.stderr
        found: dict[str, Any] = self.settings["decisions"][feature]
        return found

    def warned(self, fragment: str) -> bool:
        return any(fragment in line for line in self.stderr.splitlines() if "warning" in line)


def env_json(
    machine: str,
    directory: Path,
    engine: str,
    version: str,
    env: Mapping[str, str] | None = None,
    model_kind: str = "mha",
) -> Said:
    """The real ``kernelpolicy env --engine ENGINE --engine-version VERSION --json`` on
    ``machine`` (a fixture or one of :data:`MACHINES7`, written as a snapshot under
    ``directory``), with each of ``env`` as ``--env K=V``, run in this process."""
    from kernelpolicy.cli import main

    made = MACHINES7.get(machine)
    platform = made() if made is not None else fixture(machine)
    path = directory / f"{machine}.json"
    path.write_text(platform.to_json())
    argv = [
        "env", "--engine", engine, "--engine-version", version, "--json",
        "--platform", str(path), "--model-kind", model_kind,
    ]  # fmt: skip
    for key, value in (env or {}).items():
        argv += ["--env", f"{key}={value}"]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    printed = out.getvalue()
    return Said(code, json.loads(printed) if printed else None, err.getvalue())


def assert_said(case: Case, directory: Path) -> Said:
    """The real ``kernelpolicy env --json`` (:func:`env_json`) says what ``case`` says: whether
    the engine may start and the error, the feature's status, the variables and flags sent
    and not sent, and a warning that holds ``case.warning``."""
    said = env_json(case.fixture, directory, case.engine, case.version, case.env, case.model_kind)
    assert (said.code == 0) is case.ok, said.stderr
    assert case.error in said.stderr, said.stderr
    if not case.ok:
        return said
    assert said.decision(case.feature)["status"] == case.status.value, said.decision(case.feature)
    assert said.settings is not None
    env, words = said.settings["env"], said.settings["flags"]
    for name in case.absent:
        assert name not in env or name in case.env, env
        assert name not in words, words
    for name, value in case.present.items():
        assert env.get(name) == value, env
    if case.flags:
        runs = [tuple(words[i : i + len(case.flags)]) for i in range(len(words))]
        assert case.flags in runs, words
    if case.warning:
        assert said.warned(case.warning), said.stderr
    return said
