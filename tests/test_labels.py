"""Node labels: valid for Kubernetes, right for each machine, written as NFD reads them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kernelpolicy.api import resolve
from kernelpolicy.evidence.store import Evidence, EvidenceEntry
from kernelpolicy.labels import (
    PREFIX,
    LabelError,
    is_valid_key,
    is_valid_name,
    is_valid_value,
    label_name,
    label_value,
    node_labels,
    render_nfd,
    version_of_value,
    version_value,
    write_feature_file,
)
from kernelpolicy.limits import MAX_FEATURE_FILE_BYTES
from kernelpolicy.platform.fixtures import fixture_dir
from kernelpolicy.versions import StackVersion, parse_version
from tests.helpers import ROOT, fixture

FIXTURES = sorted(p.stem for p in (fixture_dir() / "platforms").glob("*.json"))
# Kubernetes' own rules (apimachinery validation), written out independently of labels.py.
K8S_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
K8S_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def k8s_valid(key: str, value: str) -> bool:
    prefix, _, name = key.rpartition("/")
    return (
        (not prefix or (len(prefix) <= 253 and K8S_DNS1123.match(prefix) is not None))
        and len(name) <= 63 and K8S_NAME.match(name) is not None
        and (value == "" or (len(value) <= 63 and K8S_NAME.match(value) is not None))
    )  # fmt: skip


@pytest.mark.parametrize(
    ("text", "name", "value"),
    [
        pytest.param("impl.sampler.top_k_top_p", "impl.sampler.top_k_top_p", None, id="kept"),
        pytest.param("2.11.0+cu130", None, "2.11.0-cu130", id="plus"),
        pytest.param("NVIDIA H100 80GB HBM3", None, "NVIDIA-H100-80GB-HBM3", id="spaces"),
        pytest.param("6.3.42131-fa1d09cbd", None, "6.3.42131-fa1d09cbd", id="rocm"),
        pytest.param("..x..", "x", "x", id="edges"),
        pytest.param("_a_", "a", "a", id="underscore-edges"),
        pytest.param("a//b  c", "a-b-c", "a-b-c", id="runs"),
        pytest.param("", "x", "", id="empty"),
        pytest.param("+++", "x", "", id="nothing-usable"),
        pytest.param("é-gfx942", "gfx942", "gfx942", id="non-ascii"),
        pytest.param("a" * 63, "a" * 63, "a" * 63, id="63-kept"),
    ],
)
def test_sanitise_table(text: str, name: str | None, value: str | None) -> None:
    """Names and values come out valid; valid input is kept as it is."""
    if name is not None:
        assert label_name(text) == name
    if value is not None:
        assert label_value(text) == value
    assert is_valid_name(label_name(text))
    assert is_valid_value(label_value(text))


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("a" * 64, id="64"),
        pytest.param("lib." + "x" * 200, id="long"),
        pytest.param("x" * 54 + "-" + "y" * 20, id="cut-at-dash"),
    ],
)
def test_long_texts_are_cut_with_a_hash(text: str) -> None:
    """Over 63 characters: cut, valid, and two texts that share a prefix stay apart."""
    for fit in (label_name, label_value):
        out, other = fit(text), fit(text + "z")
        assert len(out) <= 63
        assert re.fullmatch(r"(.*-)?[0-9a-f]{8}", out), out
        assert is_valid_name(out)
        assert out != other


@pytest.mark.parametrize(
    ("version", "label", "read_back"),
    [
        pytest.param("0.1.16.post3.dev0+g1a2b3c4", "0.1.16.post3.dev0-g1a2b3c4",
                     "0.1.16.post3.dev0+g1a2b3c4", id="aiter-dev-build"),
        pytest.param("0.1.7.post2.dev18", "0.1.7.post2.dev18", "0.1.7.post2.dev18",
                     id="aiter-dev"),
        pytest.param("0.1.13", "0.1.13", "0.1.13", id="aiter-release"),
        pytest.param("0.2.14.post1", "0.2.14.post1", "0.2.14.post1", id="flashinfer-post"),
        pytest.param("0.6.0rc2", "0.6.0rc2", "0.6.0rc2", id="flashinfer-rc"),
        pytest.param("2.13.0+cpu", "2.13.0-cpu", "2.13.0+cpu", id="torch-cpu"),
        pytest.param("2.11.0+cu130", "2.11.0-cu130", "2.11.0+cu130", id="torch-cuda"),
        pytest.param("2.6.0+rocm6.3.1.lw", "2.6.0-rocm6.3.1.lw", "2.6.0+rocm6.3.1.lw",
                     id="torch-rocm"),
        pytest.param("2.10.0.dev20250801+cu128", "2.10.0.dev20250801-cu128",
                     "2.10.0.dev20250801+cu128", id="torch-nightly"),
        pytest.param("2.5.0a0+git1234abc", "2.5.0a0-git1234abc", "2.5.0a0+git1234abc",
                     id="torch-source-build"),
        pytest.param("1!2.0.post1+local.7", "1_2.0.post1-local.7", "1!2.0.post1+local.7",
                     id="epoch"),
        pytest.param("1.0.0-RC1", "1.0.0rc1", "1.0.0rc1", id="not-canonical"),
        pytest.param("v2.3-1", "2.3.post1", "2.3.post1", id="not-canonical-post"),
        pytest.param("v2.3_1", "2.3-1", "2.3+1", id="dotted-underscore"),
        pytest.param("6.3.42131-fa1d09cbd", "6.3.42131-fa1d09cbd", "6.3.42131+fa1d09cbd",
                     id="dotted-build"),
        pytest.param("unknown", "unknown", "unknown", id="unreadable-stays-so"),
    ],
)  # fmt: skip
def test_library_versions_round_trip(version: str, label: str, read_back: str) -> None:
    """A library's version label is valid for Kubernetes and reads back as the same version
    (canonical PEP 440; an unreadable one stays unreadable)."""
    assert version_value(version) == label
    assert is_valid_value(label)
    assert version_of_value(label) == read_back
    assert parse_version(read_back) == parse_version(version)


def test_a_version_too_long_for_a_label_keeps_its_public_part() -> None:
    """Over 63 characters, the local label becomes a hash of it: the public version (all that
    ranges compare) reads back, the local label does not."""
    version = "0.1.16.post3.dev0+g" + "1a2b3c4d" * 8
    label = version_value(version)
    assert (len(label), is_valid_value(label)) == (26, True)
    read = parse_version(version_of_value(label))
    original = parse_version(version)
    assert isinstance(read, StackVersion)
    assert isinstance(original, StackVersion)
    assert (read.value.public, read.value.local == original.value.local) == (
        "0.1.16.post3.dev0", False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("label", "version"),
    [
        pytest.param("2.9.1-cu128", "2.9.1+cu128", id="local"),
        pytest.param("0.1.16.post3.dev0-g1a2b3c4", "0.1.16.post3.dev0+g1a2b3c4", id="dev-local"),
        pytest.param("550.54.15", "550.54.15", id="plain"),
        pytest.param("6.3.1-48", "6.3.1+48", id="numeric-local"),
        pytest.param("1.0-a-b", "1.0-a-b", id="two-dashes"),
        pytest.param("NVIDIA-H100", "NVIDIA-H100", id="not-a-version"),
        pytest.param("", "", id="empty"),
    ],
)  # fmt: skip
def test_version_labels_read_back(label: str, version: str) -> None:
    """Labels written before the canonical form (a ``-`` for the ``+`` of any local version)
    read back; anything not a canonical version's label stays as it is."""
    assert version_of_value(label) == version


@pytest.mark.parametrize(
    ("key", "valid"),
    [
        pytest.param(f"{PREFIX}/impl.mhc", True, id="ours"),
        pytest.param("impl.mhc", False, id="no-prefix"),
        pytest.param("Upper.io/x", False, id="upper-prefix"),
        pytest.param("a" * 64 + ".io/x", False, id="prefix-label-64"),
        pytest.param(".".join(["a" * 63] * 4) + "/x", False, id="prefix-255"),
        pytest.param(f"{PREFIX}/" + "x" * 64, False, id="name-64"),
        pytest.param(f"{PREFIX}/-x", False, id="name-dash"),
    ],
)
def test_key_validation_table(key: str, valid: bool) -> None:
    assert is_valid_key(key) is valid


@pytest.mark.parametrize("machine", FIXTURES)
def test_every_fixture_gives_valid_labels(machine: str) -> None:
    """Every bundled platform: every key and value valid, every decision labelled."""
    env = {"KERNELPOLICY_LOG_FORMAT": "off", "VLLM_ROCM_USE_AITER": "1"}
    resolution = resolve(fixture(machine), env)
    labels = node_labels(resolution)
    assert labels, machine
    for key, value in labels.items():
        assert k8s_valid(key, value), (key, value)
        assert key.startswith(PREFIX + "/")
    for feature in resolution.decisions:
        assert f"{PREFIX}/impl.{feature}" in labels
    platform = resolution.platform
    assert labels[f"{PREFIX}/gpu.vendor"] == platform.vendor
    if platform.primary is not None:
        assert labels[f"{PREFIX}/gpu.arch"] == platform.primary.arch
        major = platform.primary.capability.split(".")[0]
        assert labels[f"{PREFIX}/gpu.capability.major"] == major


@pytest.mark.parametrize(
    ("machine", "arch", "capability"),
    [
        pytest.param("mi250x", "gfx90a", "9.0", id="mi250x"),
        pytest.param("mi300x", "gfx942", "9.4", id="mi300x"),
        pytest.param("mi355x", "gfx950", "9.5", id="mi355x"),
        pytest.param("rx7900xtx", "gfx1100", "11.0", id="rx7900xtx"),
        pytest.param("h100-sxm", "sm_90", "9.0", id="h100"),
    ],
)
def test_gfx_target_and_capability(machine: str, arch: str, capability: str) -> None:
    """The AMD gfx target (which no other NFD source publishes) and the capability."""
    labels = node_labels(resolve(fixture(machine), {"KERNELPOLICY_LOG_FORMAT": "off"}))
    assert labels[f"{PREFIX}/gpu.arch"] == arch
    assert labels[f"{PREFIX}/gpu.capability"] == capability


def test_decisions_errors_and_evidence() -> None:
    """impl per feature (error / none when there is none), and verified.* from evidence."""
    resolution = resolve(fixture("mi250x"), {"KERNELPOLICY_LOG_FORMAT": "off"})
    evidence = Evidence(
        "k",
        {
            ("sampler.top_k_top_p", "triton"): EvidenceEntry(True, "2026-11-22", "ok", "verify"),
            ("sampler.greedy", "aiter"): EvidenceEntry(False, "2026-11-22", "bad", "verify"),
        },
    )
    labels = node_labels(resolution, evidence)
    assert labels[f"{PREFIX}/impl.sparse_attn_indexer"] == "error"  # required on AMD, off here
    assert labels[f"{PREFIX}/verified.sampler.top_k_top_p.triton"] == "true"
    assert labels[f"{PREFIX}/verified.sampler.greedy.aiter"] == "false"
    cpu = node_labels(resolve(fixture("cpu"), {"KERNELPOLICY_LOG_FORMAT": "off"}))
    assert cpu[f"{PREFIX}/impl.sparse_attn_indexer"] == "none"
    assert f"{PREFIX}/gpu.arch" not in cpu


def test_bad_prefix_is_refused() -> None:
    resolution = resolve(fixture("cpu"), {"KERNELPOLICY_LOG_FORMAT": "off"})
    with pytest.raises(LabelError, match="DNS subdomain"):
        node_labels(resolution, prefix="Not_A.Domain")


def parse_features_d(text: str) -> dict[str, str]:
    """NFD's local source: comments skipped, ``key[=value]`` lines, value defaulting to true."""
    labels = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        labels[key] = value if sep else "true"
    return labels


def test_render_round_trips_and_refuses_invalid() -> None:
    labels = {f"{PREFIX}/a": "1", f"{PREFIX}/b": ""}
    text = render_nfd(labels, comment="two\nlines")
    assert text.startswith("# two\n# lines\n")
    assert parse_features_d(text) == labels
    with pytest.raises(LabelError, match="not a valid Kubernetes label"):
        render_nfd({f"{PREFIX}/a b": "1"})


@pytest.mark.parametrize(("extra", "ok"), [pytest.param(0, True, id="at-limit"),
                                           pytest.param(1, False, id="limit+1")])  # fmt: skip
def test_feature_file_size_limit(extra: int, ok: bool) -> None:
    """MAX_FEATURE_FILE_BYTES: nfd-worker ignores bigger files, so none is written."""
    labels = {f"{PREFIX}/a": "1"}
    comment = "c" * (MAX_FEATURE_FILE_BYTES - len(render_nfd(labels)) - len("# \n") + extra)
    if ok:
        assert len(render_nfd(labels, comment=comment).encode()) == MAX_FEATURE_FILE_BYTES
    else:
        with pytest.raises(LabelError, match="MAX_FEATURE_FILE_BYTES"):
            render_nfd(labels, comment=comment)


def test_write_is_atomic_and_leaves_no_temporary(tmp_path: Path) -> None:
    """The file is replaced by rename (a new inode), mode 0644, with no dot file left."""
    first = write_feature_file(tmp_path, "a=1\n")
    inode = first.stat().st_ino
    second = write_feature_file(tmp_path, "a=2\n")
    assert second.read_text() == "a=2\n"
    assert second.stat().st_ino != inode
    assert oct(second.stat().st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kernelpolicy"]


def test_write_to_a_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LabelError, match="cannot write the feature file"):
        write_feature_file(tmp_path / "missing", "a=1\n")


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KERNELPOLICY_LOG_FORMAT": "off"}
    return subprocess.run(
        [sys.executable, "-m", "kernelpolicy", "labels", *args],
        check=False, capture_output=True, text=True, env=env, timeout=60, cwd=ROOT,
    )  # fmt: skip


def test_cli_nfd_json_and_write(tmp_path: Path) -> None:
    """labels --format nfd|json and --write DIR, for an AMD snapshot: the gfx target is there."""
    snapshot = str(fixture_dir() / "platforms/mi300x.json")
    nfd = run_cli("--platform", snapshot)
    assert nfd.returncode == 0, nfd.stderr
    parsed = parse_features_d(nfd.stdout)
    assert parsed[f"{PREFIX}/gpu.arch"] == "gfx942"
    as_json = run_cli("--platform", snapshot, "--format", "json")
    assert json.loads(as_json.stdout) == parsed
    written = run_cli("--platform", snapshot, "--write", str(tmp_path))
    assert written.returncode == 0, written.stderr
    assert parse_features_d((tmp_path / "kernelpolicy").read_text()) == parsed
    bad = run_cli("--platform", snapshot, "--write", str(tmp_path / "nope"))
    assert bad.returncode == 2
    assert "cannot write the feature file" in bad.stderr


def test_serve_writes_labels_and_rewrites_them_per_revision(tmp_path: Path) -> None:
    """serve --labels-dir: the file at start, rewritten when a reload changes a decision."""
    from kernelpolicy.testing.daemon import running_daemon

    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "10.toml").write_text((ROOT / "policies/10-sampler.toml").read_text())
    labels = tmp_path / "features.d"
    labels.mkdir()
    key = f"{PREFIX}/impl.sampler.top_k_top_p"
    with running_daemon(fixture("h100-sxm"), [policies], watch=False, labels_dir=labels) as d:
        assert parse_features_d((labels / "kernelpolicy").read_text())[key] == "flashinfer"
        (policies / "90-ops.toml").write_text(
            'schema = "kernelpolicy.policy/v1"\n[[disable]]\nfeature = "sampler.top_k_top_p"\n'
            'impl = "flashinfer"\nreason = "r"\n'
        )
        d.call(d.daemon.reload("test"))
        assert parse_features_d((labels / "kernelpolicy").read_text())[key] == "triton"


def test_serve_refuses_a_missing_labels_dir(tmp_path: Path) -> None:
    """A typo in --labels-dir stops the start with one clear line, not a warning per revision."""
    from kernelpolicy.errors import DaemonError
    from kernelpolicy.testing.daemon import running_daemon

    with (
        pytest.raises(DaemonError, match=r"--labels-dir .*not a directory"),
        running_daemon(fixture("cpu"), [ROOT / "policies"], watch=False,
                       labels_dir=tmp_path / "missing"),
    ):  # fmt: skip
        pass
