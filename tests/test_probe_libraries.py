"""Library versions and the torch build, read without importing the libraries."""

from __future__ import annotations

import importlib.metadata
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from kernelpolicy import probe
from kernelpolicy.platform.envvars import capture_env
from kernelpolicy.platform.libraries import installed_version, read_libraries, torch_build


def test_real_metadata_on_this_machine() -> None:
    """The real importlib.metadata path finds the installed torch and skips absent ones."""
    report = read_libraries(["torch", "flashinfer-python", "amd-aiter", "packaging"])
    assert report.versions["torch"] == importlib.metadata.version("torch")
    assert "flashinfer-python" not in report.versions
    assert report.errors == []


def test_real_torch_build_without_import() -> None:
    """This machine's CPU torch build is read from torch/version.py."""
    errors: list[str] = []
    build = torch_build(installed_version("torch"), errors)
    assert build.version is not None
    assert build.version.endswith("+cpu")
    assert (build.cuda, build.hip) == (None, None)
    assert errors == []


def test_broken_metadata_is_reported() -> None:
    """A distribution whose metadata raises is reported, and the others still read."""

    def lookup(name: str) -> str | None:
        if name == "amd-aiter":
            raise ValueError("metadata has no Version field")
        return {"torch": "2.9.0"}.get(name)

    report = read_libraries(["torch", "amd-aiter"], lookup)
    assert report.versions == {"torch": "2.9.0"}
    assert report.errors == [
        "library amd-aiter: broken package metadata: metadata has no Version field"
    ]


def test_broken_dist_info_on_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real .dist-info with a METADATA lacking Version is reported through importlib.metadata."""
    dist = tmp_path / "flashinfer_python-0.0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: flashinfer-python\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    report = read_libraries(["flashinfer-python"])
    assert report.versions == {}
    assert "flashinfer-python: broken package metadata" in report.errors[0]


def test_the_direct_reader_agrees_with_importlib_metadata() -> None:
    """Every distribution installed here: the probe's own dist-info reader gives exactly the
    version importlib.metadata gives, under every spelling of the name."""
    names = {d.metadata["Name"] for d in importlib.metadata.distributions()}
    assert len(names) > 50
    for name in sorted(names):
        expected = importlib.metadata.version(name)
        for spelling in (name, name.upper(), name.replace("-", "_"), name.replace("_", ".")):
            assert installed_version(spelling) == expected, spelling
    assert installed_version("no-such-distribution-anywhere") is None


def _dist(root: Path, folder: str, metadata: str, file: str = "METADATA") -> None:
    (root / folder).mkdir(parents=True)
    (root / folder / file).write_text(metadata)


@pytest.mark.parametrize(
    ("layout", "name", "expected"),
    [
        pytest.param(
            lambda r: _dist(r, "Flashinfer_Python-0.7.2.post1.dist-info",
                            "Name: flashinfer-python\nVersion: 0.7.2.post1\n"),
            "flashinfer-python", "0.7.2.post1", id="dist-info",
        ),
        pytest.param(
            lambda r: _dist(r, "amd_aiter-0.1.7.egg-info",
                            "Name: amd-aiter\nversion:  0.1.7.post2.dev18\n", "PKG-INFO"),
            "amd-aiter", "0.1.7.post2.dev18", id="egg-info-pkg-info",
        ),
        pytest.param(
            lambda r: _dist(r, "vllm-0.12.0.dist-info",
                            "Name: vllm\n\nVersion: 9.9 (in the body, not a header)\n"),
            "vllm", None, id="version-after-the-headers",
        ),
    ],
)  # fmt: skip
def test_the_direct_reader_on_fake_site_dirs(
    layout: Callable[[Path], None],
    name: str,
    expected: str | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A site directory first on sys.path: both readers see the same version (or the same
    missing Version, which is reported as broken metadata)."""
    layout(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    report = read_libraries([name])
    assert report.versions.get(name) == expected
    assert (importlib.metadata.version(name) or None) == expected
    assert bool(report.errors) == (expected is None)


def test_a_zip_on_the_path_goes_to_importlib_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A zip archive on sys.path can hold distributions the directory reader cannot see:
    importlib.metadata answers then."""
    archive = tmp_path / "site.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zipped_dist-1.2.3.dist-info/METADATA", "Name: zipped-dist\nVersion: 1.2.3\n")
    monkeypatch.syspath_prepend(str(archive))
    assert installed_version("zipped-dist") == "1.2.3"


@pytest.mark.parametrize(
    ("source", "version", "cuda", "hip"),
    [
        pytest.param(
            "cuda: Optional[str] = '13.0'\nhip: Optional[str] = None\n",
            "2.11.0",
            "13.0",
            None,
            id="annotated-cuda",
        ),
        pytest.param(
            "cuda = None\nhip = '6.3.42131-fa1d09cbd'\n",
            "2.7.0+rocm6.3",
            None,
            "6.3.42131-fa1d09cbd",
            id="plain-hip",
        ),
    ],
)
def test_torch_version_file(
    source: str, version: str, cuda: str | None, hip: str | None, tmp_path: Path
) -> None:
    """torch/version.py literal assignments give the CUDA or HIP runtime."""
    path = tmp_path / "version.py"
    path.write_text(source)
    build = torch_build(version, [], path)
    assert (build.cuda, build.hip) == (cuda, hip)


@pytest.mark.parametrize(
    ("version", "cuda", "hip"),
    [
        pytest.param("2.11.0+cu130", "13.0", None, id="cu130"),
        pytest.param("2.5.1+cu124", "12.4", None, id="cu124"),
        pytest.param("2.7.0+rocm6.3", None, "6.3", id="rocm"),
        pytest.param("2.13.0+cpu", None, None, id="cpu"),
        pytest.param("2.9.0", None, None, id="no-tag"),
    ],
)
def test_torch_build_from_local_tag(
    version: str, cuda: str | None, hip: str | None, tmp_path: Path
) -> None:
    """Without a readable version.py, the local version tag is the fallback."""
    errors: list[str] = []
    bad = tmp_path / "version.py"
    bad.write_text("cuda = (\n")
    build = torch_build(version, errors, bad)
    assert (build.cuda, build.hip) == (cuda, hip)
    assert "using the version tag" in errors[0]


ENVIRON = {
    "MY_FLAG": "1", "HOME": "/root", "VLLM_ROCM_USE_AITER_MOE": "0", "KERNELPOLICY_X": "y",
    "KERNELPOLICY_TLS_KEY_FILE": "/k.pem", "KERNELPOLICY_FORCE_MHC": "torch",
    "VLLM_ROCM_USE_AITER": "1", "CUDA_VISIBLE_DEVICES": "0",
}  # fmt: skip


@pytest.mark.parametrize(
    ("patterns", "captured"),
    [
        pytest.param(
            None, {"KERNELPOLICY_FORCE_MHC": "torch", "VLLM_ROCM_USE_AITER": "1"}, id="defaults"
        ),
        pytest.param(["MY_FLAG"], {"MY_FLAG": "1"}, id="what-the-policies-read"),
        pytest.param(["VLLM_ROCM_USE_AITER*"], {"VLLM_ROCM_USE_AITER": "1",
                     "VLLM_ROCM_USE_AITER_MOE": "0"}, id="pattern"),
    ],
)  # fmt: skip
def test_extra_libraries_and_env_patterns(
    patterns: list[str] | None, captured: dict[str, str], empty_root: Path
) -> None:
    """Names a policy adds are looked up; env capture takes only the variables the policies
    read (by default the bundled switches and forced implementations), never settings."""
    versions = {"deep-gemm": "2.1.0", "torch": "2.9.0"}
    platform = probe(
        root=empty_root, nvml=None, amdsmi=None, metadata=versions.get,
        libraries=["deep-gemm"], env_patterns=patterns, environ=ENVIRON,
        torch_version_file=empty_root / "missing.py",
    )  # fmt: skip
    assert platform.libraries == {"torch": "2.9.0", "deep-gemm": "2.1.0"}
    assert platform.env == captured


def test_capture_env_is_case_sensitive() -> None:
    """Environment names are case-sensitive on Linux, and so is the capture."""
    assert capture_env({"vllm_use_flashinfer_sampler": "1"}, ["VLLM_USE_FLASHINFER_SAMPLER"]) == {}


@pytest.mark.parametrize(
    ("version", "message"),
    [
        pytest.param("1." * 200, "not a string of at most MAX_VERSION_CHARS", id="too-long"),
        pytest.param(2.1, "not a string", id="float"),
        pytest.param("0.11'$(touch X)'", "is not a PEP 440 version", id="shell-in-a-version"),
        pytest.param("0.11 beta", "is not a PEP 440 version", id="a-space"),
        pytest.param("6.3.42131-fa1d09cbd", "is not a PEP 440 version", id="dotted-build-tag"),
        pytest.param("\u0663.0", "is not a PEP 440 version", id="a-non-ascii-digit"),
        pytest.param("", "is not a PEP 440 version", id="empty"),
    ],
)
def test_broken_library_versions_cost_only_that_library(
    version: object, message: str, empty_root: Path
) -> None:
    """A distribution whose metadata version is garbage is reported; the others are read."""
    versions = {"torch": "2.9.0", "vllm": version}
    platform = probe(
        root=empty_root, nvml=None, amdsmi=None, metadata=versions.get,  # type: ignore[arg-type]
        environ={}, torch_version_file=empty_root / "missing.py",
    )  # fmt: skip
    assert platform.libraries == {"torch": "2.9.0"}
    assert any(e.startswith("library vllm: ") and message in e for e in platform.probe_errors)


@pytest.mark.parametrize(
    "version",
    [
        pytest.param("2.11.0+cu130", id="local-label"),
        pytest.param("0.11.0rc1", id="release-candidate"),
        pytest.param("0.1.16.post3.dev0+g1a2b3c4", id="post-dev-local"),
        pytest.param("1!2.0", id="epoch"),
        pytest.param("0.7.2-1", id="implicit-post-release"),
        pytest.param("v1.0", id="leading-v"),
    ],
)
def test_pep_440_library_versions_are_kept_as_written(version: str, empty_root: Path) -> None:
    """Any PEP 440 version is kept as its metadata writes it: the common shapes without
    packaging, the rest (an epoch, a spelling PEP 440 normalizes) through it."""
    platform = probe(
        root=empty_root, nvml=None, amdsmi=None, metadata={"vllm": version}.get,
        environ={}, torch_version_file=empty_root / "missing.py",
    )  # fmt: skip
    assert platform.libraries == {"vllm": version}
    assert not [e for e in platform.probe_errors if e.startswith("library ")]


def test_a_value_the_model_refuses_is_dropped_not_raised(
    empty_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last safety net: a stage's value the Platform model refuses is dropped and reported."""
    from kernelpolicy.platform import probing

    monkeypatch.setattr(
        probing, "_hardware", lambda *args: {"vendor": "nvidia", "driver": {"version": "9" * 300}}
    )
    platform = probe(root=empty_root, nvml=None, amdsmi=None, environ={}, metadata=lambda n: None)
    assert platform.vendor == "nvidia"
    assert platform.driver.version is None
    assert "probe: dropped driver: invalid value" in platform.probe_errors[-1]
