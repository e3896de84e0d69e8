"""The compiled-pack cache: a hit resolves exactly as the files do, imports no validation stack,
and is never trusted over the files or over another user."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from kernelpolicy.engine.decide import resolve_policies
from kernelpolicy.inputs import load_policies_cached
from kernelpolicy.limits import MAX_PACK_CACHE_BYTES
from kernelpolicy.platform.model import load_platform
from kernelpolicy.policy import packcache
from kernelpolicy.policy.compiled import PolicySet
from kernelpolicy.policy.files import read_policy_sources
from kernelpolicy.policy.loader import load_policies
from kernelpolicy.policy.packcache import PACK_CACHE_ENTRIES, cache_key, load_cached, pack_dir
from kernelpolicy.policy.record import SpecRecord, decode, encode
from kernelpolicy.render import explain_table
from kernelpolicy.settings import VARIABLES, bundled_policy_dir
from kernelpolicy.testing.engine_golden import render_golden

FIXTURES = Path(__file__).resolve().parent.parent / "kernelpolicy" / "fixtures" / "platforms"
PLATFORMS = sorted(p.stem for p in FIXTURES.glob("*.json"))
OTHER_UID = 65534


def _sources() -> list[tuple[str, str]]:
    return read_policy_sources([bundled_policy_dir()])


def _entry(cache: Path) -> Path:
    return pack_dir(cache) / f"{cache_key(_sources())}.json"


def _cached(cache: Path) -> PolicySet:
    """A set that certainly came from the cache: the entry is written, then read back."""
    load_cached(_sources(), cache)
    assert _entry(cache).is_file()
    policies = load_cached(_sources(), cache)
    assert isinstance(next(iter(policies.features.values())).spec, SpecRecord)
    return policies


@pytest.fixture(scope="module")
def fresh() -> PolicySet:
    return load_policies([bundled_policy_dir()])


@pytest.fixture(scope="module")
def cached(tmp_path_factory: pytest.TempPathFactory) -> PolicySet:
    return _cached(tmp_path_factory.mktemp("cache"))


@pytest.mark.parametrize("platform", PLATFORMS)
def test_a_hit_resolves_like_the_files(platform: str, fresh: PolicySet, cached: PolicySet) -> None:
    """Every bundled platform: the same decisions, fingerprint, explain table and select/gate
    answers from a cached set as from the files."""
    snapshot = load_platform(FIXTURES / f"{platform}.json")
    env = {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
    a = resolve_policies(snapshot, env, fresh)
    b = resolve_policies(snapshot, env, cached)
    assert b.to_dict() == a.to_dict()
    assert b.fingerprint == a.fingerprint
    assert explain_table(b) == explain_table(a)
    assert cached.digest == fresh.digest
    assert cached.files == fresh.files
    assert cached.env_names == fresh.env_names
    assert cached.library_names == fresh.library_names


def test_engine_settings_match(fresh: PolicySet, cached: PolicySet) -> None:
    """What every engine is told, over the whole golden table, is the same from a hit."""
    assert render_golden(cached) == render_golden(fresh)


def test_records_round_trip(fresh: PolicySet) -> None:
    """encode/decode keep every field of every element, nested models and mappings included."""
    for feature in fresh.features.values():
        record = decode(json.loads(json.dumps(encode(feature.spec))))
        assert encode(record) == encode(feature.spec)
        for spec, rec in zip(feature.spec.candidates, record.candidates, strict=True):
            assert rec.unconditional == spec.unconditional
            assert rec.impl == spec.impl


_IMPORTED = (
    "import sys, kernelpolicy; kernelpolicy.resolve(); "
    "print(sorted(m for m in ('pydantic', 'tomllib', 'structlog', 'cel', "
    "'kernelpolicy.policy.schema', 'kernelpolicy.policy.schema.model', "
    "'kernelpolicy.policy.schema.conditions', 'kernelpolicy.policy.schema.bridge', "
    "'kernelpolicy.policy.loader', 'secrets') if m in sys.modules))"
)


def _hit_env(tmp_path: Path, **settings: str) -> dict[str, str]:
    """This environment without kernelpolicy's settings variables, plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    return {**env, "XDG_CACHE_HOME": str(tmp_path), **settings}


def test_a_hit_imports_no_validation_stack(tmp_path: Path) -> None:
    """A worker whose pack is cached imports neither pydantic, TOML, the CEL library nor
    structlog: the point of the cache (the cold-start budget); nor secrets (the daemon
    instance's ID, drawn with it and socket, cost a first resolve() 5-7 ms)."""
    env = _hit_env(tmp_path)
    run = [sys.executable, "-c", _IMPORTED]
    first = subprocess.run(run, check=True, env=env, capture_output=True, text=True)
    second = subprocess.run(run, check=True, env=env, capture_output=True, text=True)
    assert "pydantic" in first.stdout  # the miss validated the files
    assert second.stdout.strip() == "[]"


def test_a_hit_with_a_setting_imports_only_the_settings_model(tmp_path: Path) -> None:
    """A worker that sets a KERNELPOLICY_ setting no process validated before imports
    pydantic for the settings model only: still no TOML, CEL library, policy schema or loader
    on a hit; one whose setting an earlier process validated (the settings memo) imports
    none of them."""
    run = [sys.executable, "-c", _IMPORTED]
    env = _hit_env(tmp_path, KERNELPOLICY_LOG_FORMAT="console")
    subprocess.run(run, check=True, env=env, capture_output=True, text=True)
    remembered = subprocess.run(run, check=True, env=env, capture_output=True, text=True)
    assert remembered.stdout.strip() == "[]"
    new = _hit_env(tmp_path, KERNELPOLICY_LOG_FORMAT="off")
    first = subprocess.run(run, check=True, env=new, capture_output=True, text=True)
    assert first.stdout.strip() == "['pydantic']"


def _foreign(path: Path) -> None:
    os.chown(path, OTHER_UID, OTHER_UID)


def _group_writable(path: Path) -> None:
    path.chmod(0o620)


def _garbage(path: Path) -> None:
    path.write_bytes(b'{"format": 1, "key": "')


def _wrong_key(path: Path) -> None:
    data = json.loads(path.read_text())
    data["key"] = "0" * 32
    path.write_text(json.dumps(data))


def _link_to_foreign(path: Path) -> None:
    target = path.with_name("elsewhere.json.bak")
    path.rename(target)
    _foreign(target)
    path.symlink_to(target)


def _directory_open(path: Path) -> None:
    path.parent.chmod(0o777)


def _oversized(path: Path) -> None:
    with path.open("ab") as handle:
        handle.truncate(MAX_PACK_CACHE_BYTES + 1)


def _poison(path: Path) -> None:
    """Rewrite the entry so that it would make a visible, wrong difference if used: the
    sampler's first candidate renamed."""
    text = path.read_text()
    assert '"impl":"flashinfer"' in text
    path.write_text(text.replace('"impl":"flashinfer"', '"impl":"poisoned"'))


BAD_ENTRIES = [
    pytest.param(_foreign, id="owned-by-another-user"),
    pytest.param(_group_writable, id="group-writable"),
    pytest.param(_link_to_foreign, id="link-to-a-foreign-file"),
    pytest.param(_directory_open, id="directory-writable-by-others"),
    pytest.param(_garbage, id="truncated-json"),
    pytest.param(_wrong_key, id="key-mismatch"),
    pytest.param(_oversized, id="over-MAX_PACK_CACHE_BYTES"),
]


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
@pytest.mark.parametrize("damage", BAD_ENTRIES)
def test_a_bad_entry_is_never_used(
    damage: Callable[[Path], None], tmp_path: Path, fresh: PolicySet
) -> None:
    """A poisoned entry that is also untrusted or broken is a miss: the files decide, and the
    set equals a fresh load."""
    _cached(tmp_path)
    entry = _entry(tmp_path)
    if damage not in (_garbage, _oversized):
        _poison(entry)
    damage(entry)
    policies = load_cached(_sources(), tmp_path)
    assert isinstance(next(iter(policies.features.values())).spec, SpecRecord) is False
    assert "poisoned" not in {c.impl for f in policies.features.values() for c in f.candidates}
    assert [c.impl for c in policies.features["sampler.top_k_top_p"].candidates] == [
        c.impl for c in fresh.features["sampler.top_k_top_p"].candidates
    ]


def test_a_trusted_poisoned_entry_shows_the_cache_is_read(tmp_path: Path) -> None:
    """The control for the test above: the same poisoned entry, trusted and well-formed, is
    used (so the misses above are the checks at work, not a cache that is never read)."""
    _cached(tmp_path)
    _poison(_entry(tmp_path))
    policies = load_cached(_sources(), tmp_path)
    assert "poisoned" in {c.impl for f in policies.features.values() for c in f.candidates}


def test_an_edit_is_a_miss(tmp_path: Path) -> None:
    """The key hashes the texts: any edit loads the files (and writes a new entry)."""
    policy = tmp_path / "p.toml"
    body = (bundled_policy_dir() / "10-sampler.toml").read_text()
    policy.write_text(body)
    cache = tmp_path / "cache"
    first = load_cached(read_policy_sources([policy]), cache)
    policy.write_text(body.replace('reference = "', 'reference = "edited: ', 1))
    second = load_cached(read_policy_sources([policy]), cache)
    assert first.digest != second.digest
    assert len(list(pack_dir(cache).glob("*.json"))) == 2


def test_a_code_change_is_a_miss(monkeypatch: pytest.MonkeyPatch) -> None:
    """The key covers the code that validates policies (its size and mtime stamp), so the
    same files under changed validation code are loaded again."""
    before = cache_key(_sources())
    stamp = packcache._code_stamp()
    assert "policy/schema/model.py:" in stamp
    monkeypatch.setattr(packcache, "_code_stamp", lambda: stamp + "\0policy/schema/model.py:edited")
    assert cache_key(_sources()) != before


def test_old_entries_are_pruned(tmp_path: Path) -> None:
    """At most PACK_CACHE_ENTRIES entries stay: the newest."""
    policy = tmp_path / "p.toml"
    body = (bundled_policy_dir() / "10-sampler.toml").read_text()
    cache = tmp_path / "cache"
    for i in range(PACK_CACHE_ENTRIES + 3):
        policy.write_text(body + f"\n# edit {i}\n")
        load_cached(read_policy_sources([policy]), cache)
    assert len(list(pack_dir(cache).glob("*.json"))) == PACK_CACHE_ENTRIES


def test_an_unwritable_cache_is_no_cache(tmp_path: Path) -> None:
    """A cache directory that cannot be created (a file in the way) costs nothing but speed."""
    blocked = tmp_path / "cache"
    blocked.write_text("not a directory")
    policies = load_cached(_sources(), blocked)
    assert "sampler.top_k_top_p" in policies.features


def test_the_cache_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pack_cache=False (KERNELPOLICY_PACK_CACHE=0) writes nothing."""
    monkeypatch.setattr("kernelpolicy.inputs._POLICY_CACHE", {})
    load_policies_cached([bundled_policy_dir()], cache_dir=tmp_path, pack_cache=False)
    assert not pack_dir(tmp_path).exists()
    monkeypatch.setattr("kernelpolicy.inputs._POLICY_CACHE", {})
    load_policies_cached([bundled_policy_dir()], cache_dir=tmp_path / "on")
    assert len(list(pack_dir(tmp_path / "on").glob("*.json"))) == 1


def test_entries_are_private(tmp_path: Path) -> None:
    """The directory is 0700 and each entry 0600."""
    _cached(tmp_path)
    assert pack_dir(tmp_path).stat().st_mode & 0o777 == 0o700
    assert _entry(tmp_path).stat().st_mode & 0o777 == 0o600
