"""Policy files and directories another user owns or can write are refused before reading."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import kernelpolicy
from kernelpolicy.errors import UntrustedFileError
from kernelpolicy.platform.fixtures import fixture_dir
from kernelpolicy.policy import load_policies, read_policy_sources
from kernelpolicy.settings import bundled_policy_dir

REPO = Path(__file__).resolve().parent.parent
POLICY = """schema = "kernelpolicy.policy/v1"

[features.mhc]
description = "x"
fallback = "torch"

[[features.mhc.candidates]]
impl = "torch"
"""
NOBODY = 65534

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
needs_setfacl = pytest.mark.skipif(
    shutil.which("setfacl") is None, reason="setfacl is not installed (Debian package acl)"
)


def policy_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "policies"
    directory.mkdir(mode=0o755)
    (directory / "p.toml").write_text(POLICY)
    return directory


def chmod_file(mode: int) -> Callable[[Path], Path]:
    def change(directory: Path) -> Path:
        os.chmod(directory / "p.toml", mode)
        return directory / "p.toml"

    return change


def chmod_dir(mode: int) -> Callable[[Path], Path]:
    def change(directory: Path) -> Path:
        os.chmod(directory, mode)
        return directory

    return change


def chown_file(directory: Path) -> Path:
    os.chown(directory / "p.toml", NOBODY, NOBODY)
    return directory / "p.toml"


CASES = [
    pytest.param(chmod_file(0o666), "p.toml: writable by others (mode 0666", id="file-0666"),
    pytest.param(chmod_file(0o664), "p.toml: writable by its group (mode 0664", id="file-0664"),
    pytest.param(
        chown_file, f"p.toml: owned by uid {NOBODY} (mode 0644)", id="file-owned-by-nobody",
        marks=needs_root,
    ),
    pytest.param(chmod_dir(0o777), "policies: writable by others (mode 0777", id="dir-0777"),
    pytest.param(chmod_dir(0o775), "policies: writable by its group (mode 0775", id="dir-0775"),
]  # fmt: skip


@pytest.mark.parametrize(("make_untrusted", "message"), CASES)
@pytest.mark.parametrize("given", ["directory", "file"])
def test_untrusted_policy_is_refused(
    make_untrusted: Callable[[Path], Path], message: str, given: str, tmp_path: Path
) -> None:
    """One line naming the file (or directory), the owner and the mode, before anything is read;
    whether the directory or the file itself was given."""
    directory = policy_dir(tmp_path)
    make_untrusted(directory)
    path = directory if given == "directory" else directory / "p.toml"
    with pytest.raises(UntrustedFileError) as info:
        read_policy_sources([path])
    text = str(info.value)
    assert message in text
    assert "\n" not in text
    assert "KERNELPOLICY_ALLOW_UNTRUSTED_FILES=1" in text


def _files(directory: Path, count: int) -> list[Path]:
    files = [directory / f"{index:02d}.toml" for index in range(count)]
    for file in files:
        file.write_text(POLICY.replace("mhc", f"f{file.stem}"))
    return files


@pytest.mark.parametrize(
    ("untrusted", "directory_too", "lines", "more"),
    [
        pytest.param(3, False, 3, None, id="three-files"),
        pytest.param(3, True, 4, None, id="three-files-and-their-directory"),
        pytest.param(12, False, 10, "and 2 more", id="over-the-shown-limit"),
    ],
)
def test_every_untrusted_path_is_named_at_once(
    untrusted: int, directory_too: bool, lines: int, more: str | None, tmp_path: Path
) -> None:
    """Several untrusted files (a checkout made under a permissive umask) are named in one
    error, the directory once though each file in it reports it too: one fix covers them all,
    instead of one run per file."""
    directory = tmp_path / "policies"
    directory.mkdir(mode=0o755)
    files = _files(directory, untrusted)
    for file in files:
        file.chmod(0o666)
    if directory_too:
        directory.chmod(0o777)
    with pytest.raises(UntrustedFileError) as info:
        read_policy_sources([directory])
    head, *named = str(info.value).splitlines()
    count = untrusted + directory_too
    assert head == (
        f"refusing {count} policy paths another user could change "
        "(set KERNELPOLICY_ALLOW_UNTRUSTED_FILES=1 to accept)"
    )
    assert len([line for line in named if "writable by others" in line]) == lines
    assert named[-1] == f"  {more}" if more else "more" not in named[-1]
    if directory_too:
        assert named[0].startswith(f"  policy directory {directory}: writable by others")


@pytest.mark.parametrize(("make_untrusted", "message"), CASES)
def test_opt_out_accepts_untrusted(
    make_untrusted: Callable[[Path], Path], message: str, tmp_path: Path
) -> None:
    """allow_untrusted (KERNELPOLICY_ALLOW_UNTRUSTED_FILES) loads the same files."""
    directory = policy_dir(tmp_path)
    make_untrusted(directory)
    assert list(load_policies([directory], allow_untrusted=True).features) == ["mhc"]


def test_resolve_takes_the_setting(tmp_path: Path) -> None:
    """resolve() refuses an untrusted file and accepts it with the setting in its env; a
    cached load does not skip the check after a chmod."""
    directory = policy_dir(tmp_path)
    platform = kernelpolicy.load_platform(fixture_dir() / "platforms" / "h100-sxm.json")
    assert kernelpolicy.resolve(platform, {}, [directory]).decision("mhc").impl == "torch"
    os.chmod(directory / "p.toml", 0o666)
    with pytest.raises(UntrustedFileError):
        kernelpolicy.resolve(platform, {}, [directory])
    env = {"KERNELPOLICY_ALLOW_UNTRUSTED_FILES": "1"}
    assert kernelpolicy.resolve(platform, env, [directory]).decision("mhc").impl == "torch"


def test_bundled_pack_and_tmp_dirs_are_trusted(tmp_path: Path) -> None:
    """What ships and what pytest creates pass the check without the opt-out."""
    assert load_policies([bundled_policy_dir()]).features
    assert load_policies([policy_dir(tmp_path)]).features


@pytest.mark.parametrize(
    ("env", "code"),
    [
        pytest.param({}, 1, id="refused"),
        pytest.param({"KERNELPOLICY_ALLOW_UNTRUSTED_FILES": "1"}, 0, id="opt-out"),
    ],
)
def test_check_cli_reports_untrusted(env: dict[str, str], code: int, tmp_path: Path) -> None:
    """`kernelpolicy check` prints the refusal as one issue (no traceback) and exits 1."""
    directory = policy_dir(tmp_path)
    os.chmod(directory / "p.toml", 0o666)
    result = subprocess.run(
        [sys.executable, "-m", "kernelpolicy", "check", str(directory)],
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == code, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    if code:
        assert "writable by others (mode 0666" in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param(
            lambda d: os.chmod(d / "p.toml", 0o666), "writable by others", id="file-made-untrusted"
        ),
        pytest.param(
            lambda d: (d / "p.toml").write_text(
                POLICY.replace(
                    'impl = "torch"',
                    'impl = "torch"\n[[features.mhc.candidates]]\n'
                    'impl = "aiter"\nwhen = "4096 / tokens > 8"',
                ).replace('fallback = "torch"', 'fallback = "torch"\ncontext = { tokens = "int" }')
            ),
            "ZeroDivisionError",
            id="division-by-zero-rule",
        ),
    ],
)
def test_daemon_reload_reports_and_keeps_serving(
    change: Callable[[Path], object], expected: str, tmp_path: Path
) -> None:
    """A reload of files that became untrusted, or whose rule divides by zero at load, is a
    reported error (the last good set keeps serving), not an exception in the watcher."""
    from kernelpolicy.server.state import ServingState

    directory = policy_dir(tmp_path)
    platform = kernelpolicy.load_platform(fixture_dir() / "platforms" / "cpu.json")
    state = ServingState(platform, {}, [directory], {})
    change(directory)
    prepared = state.prepare_reload()
    assert isinstance(prepared, str)
    assert expected in prepared
    assert "a kernelpolicy bug" not in prepared  # a located policy error, not a caught crash
    state.commit(prepared)
    assert state.snapshot.resolution.decision("mhc").impl == "torch"
    assert state.snapshot.policy_error == prepared


def _installed_under_umask_002(tmp_path: Path, code_writable: bool) -> Path:
    """A copy of kernelpolicy laid out as pip installs it (the bundled pack a real directory
    in the package), every directory and file group-writable as `umask 002` leaves them; with
    ``code_writable`` False, the package directory and its __init__.py are not."""
    site = tmp_path / "site"
    shutil.copytree(
        REPO / "kernelpolicy", site / "kernelpolicy", symlinks=False,
        ignore=shutil.ignore_patterns("__pycache__", "fixtures"),
    )  # fmt: skip
    for path in [site, *site.rglob("*")]:
        path.chmod(0o775 if path.is_dir() else 0o664)
    if not code_writable:
        (site / "kernelpolicy").chmod(0o755)
        (site / "kernelpolicy" / "__init__.py").chmod(0o644)
    return site


@pytest.mark.parametrize(
    ("code_writable", "policies", "exit_code", "said"),
    [
        pytest.param(True, None, 0, "ok: ", id="bundled-pack-as-writable-as-the-code"),
        pytest.param(
            False, None, 1,
            "bundled_policies: refusing this policy directory: writable by its group",
            id="bundled-pack-more-writable-than-the-code",
        ),
        pytest.param(
            True, "mine", 1, "mine: refusing this policy directory: writable by its group",
            id="own-directory-still-refused",
        ),
        pytest.param(
            True, "acl", 1, "10-sampler.toml: refusing this policy file: writable by its group",
            id="bundled-file-with-an-acl", marks=needs_setfacl,
        ),
    ],
)  # fmt: skip
def test_an_install_made_under_umask_002(
    code_writable: bool, policies: str | None, exit_code: int, said: str, tmp_path: Path
) -> None:
    """`kernelpolicy check` from an installation whose files are all group-writable (pip under
    Ubuntu's default umask for people): the bundled pack is held to the rule of the code that
    reads it, since that group can change the code anyway; a directory of one's own is not."""
    site = _installed_under_umask_002(tmp_path, code_writable)
    argv = [sys.executable, "-m", "kernelpolicy", "check"]
    if policies == "acl":  # a named user may write it: the group bits are the ACL's mask
        bundled = site / "kernelpolicy" / "bundled_policies" / "10-sampler.toml"
        subprocess.run(["setfacl", "-m", f"u:{NOBODY}:rw", str(bundled)], check=True)
    elif policies is not None:
        mine = tmp_path / policies
        mine.mkdir(mode=0o775)
        mine.chmod(0o775)
        shutil.copy(site / "kernelpolicy" / "bundled_policies" / "10-sampler.toml", mine)
        argv.append(str(mine))
    env = {**os.environ, "PYTHONPATH": str(site), "KERNELPOLICY_LOG_FORMAT": "off"}
    env.pop("KERNELPOLICY_ALLOW_UNTRUSTED_FILES", None)
    done = subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == exit_code, done.stdout + done.stderr
    assert said in done.stdout + done.stderr
    imported = subprocess.run(
        [sys.executable, "-c", "import kernelpolicy; print(kernelpolicy.__file__)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert imported.startswith(str(site))  # the copy ran, not the checkout


def test_check_reports_each_untrusted_path_where_it_is(tmp_path: Path) -> None:
    """`kernelpolicy check` (its --json too) has an issue located at each path refused, the
    directory once, instead of one '<policies>' issue holding them all."""
    from kernelpolicy.check import check_policies

    directory = tmp_path / "policies"
    directory.mkdir()
    files = _files(directory, 2)
    for file in files:
        file.chmod(0o666)
    directory.chmod(0o777)
    report = check_policies([directory])
    assert [issue.file for issue in report.issues] == [str(directory), *map(str, files)]
    assert [issue.message.split(":")[0] for issue in report.issues] == [
        "refusing this policy directory", "refusing this policy file", "refusing this policy file",
    ]  # fmt: skip
    assert all("writable by others" in issue.message for issue in report.issues)


@pytest.mark.parametrize(
    ("trusted", "refused"),
    [
        pytest.param(True, True, id="checked-as-opened"),
        pytest.param(False, False, id="opted-out"),
    ],
)
def test_the_file_read_is_the_file_checked(tmp_path: Path, trusted: bool, refused: bool) -> None:
    """A policy file put in place after its path was checked (here: made world-writable after
    check_policy_trust, by calling the reader alone) is refused on the descriptor read, unless
    the caller opted out of the trust check."""
    from kernelpolicy.policy.files import read_listed_sources

    directory = policy_dir(tmp_path)
    (directory / "p.toml").chmod(0o666)
    if refused:
        with pytest.raises(UntrustedFileError, match=r"p\.toml as opened: writable by others"):
            read_listed_sources([directory / "p.toml"], trusted=trusted)
    else:
        assert read_listed_sources([directory / "p.toml"], trusted=trusted)[0][1] == POLICY
