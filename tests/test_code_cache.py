"""kernelpolicy.code_cache: the methods dataclasses writes for kernelpolicy's classes and the
generated select/gate are compiled once per node, give the same classes and functions, and a
cache file that may not be trusted or read is ignored."""

from __future__ import annotations

import dataclasses
import json
import marshal
import os
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kernelpolicy.code_cache import CodeCache, cache_place, code_cached
from kernelpolicy.settings import VARIABLES
from tests.helpers import ROOT, UNTRUSTED_ENTRIES

CLASS_SOURCE = """
from dataclasses import dataclass, field

@dataclass(frozen=True)
class Point:
    x: int
    y: int = 0
    tags: tuple[str, ...] = field(default=(), compare=False)
"""


def _make_class(module_name: str) -> type:
    """``Point`` made in a fresh module named ``module_name`` (dataclasses compiles its methods
    in that module's namespace)."""
    module = types.ModuleType(module_name)
    sys.modules[module_name] = module
    try:
        # Compiled without this test module's __future__ flags: annotations are evaluated.
        exec(compile(CLASS_SOURCE, module_name, "exec", dont_inherit=True), module.__dict__)
    finally:
        del sys.modules[module_name]
    point: type = module.__dict__["Point"]
    return point


def _behaviour(point: type) -> tuple[object, ...]:
    a, b = point(1, 2, ("t",)), point(1, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.x = 3
    return (
        repr(a), a == b, hash(a) == hash(b), a == point(2, 2),
        vars(point)["__init__"].__annotations__, [f.name for f in dataclasses.fields(point)],
    )  # fmt: skip


@pytest.fixture
def place(tmp_path: Path) -> Path:
    return tmp_path / "code" / "tag.marshal"


def _filled(place: Path) -> CodeCache:
    cache = CodeCache(place)
    with code_cached(cache):
        _make_class("kernelpolicy._test_dataclass_cache")
    return cache


@pytest.mark.parametrize(
    "module", ["kernelpolicy._test_dataclass_cache", "tests._test_dataclass_cache"]
)
def test_a_class_made_inside_is_the_class_made_without(module: str, place: Path) -> None:
    """Kept code (kernelpolicy's module) or not (another's), a class behaves exactly as one
    made with no hook: repr, equality, hash, frozen, and __init__'s annotations evaluated (not
    strings, as this module's __future__ import would make them if its flags leaked)."""
    plain = _behaviour(_make_class(module))
    _filled(place)
    second = CodeCache(place)
    with code_cached(second):
        cached = _behaviour(_make_class(module))
    assert cached == plain
    assert plain[4] == {"x": int, "y": int, "tags": tuple[str, ...], "return": None}
    ours = module.startswith("kernelpolicy.")
    assert (second.reused > 0, second.compiled) == (ours, 0)


def test_the_first_process_compiles_and_writes_the_next_reuses(place: Path) -> None:
    first = _filled(place)
    assert first.compiled >= 4  # __init__, __repr__, __eq__, __hash__, frozen __setattr__...
    assert first.reused == 0
    assert place.stat().st_mode & 0o777 == 0o600
    assert place.parent.stat().st_mode & 0o777 == 0o700
    second = _filled(place)
    assert (second.compiled, second.reused) == (0, first.compiled)


GENERATED = "def pick(name, /, batch=0):\n    return name if batch < 256 else 'triton'\n"


def test_generated_code_is_kept_only_while_held(place: Path) -> None:
    """compile_kept's path (the hot path's select/gate): compiled and kept inside a holder,
    reused by the next process's cache, and compiled as before (nothing kept) outside."""
    first = CodeCache(place)
    outside = first.compile(GENERATED, "<kernelpolicy select>")
    assert (first.compiled, first.codes) == (0, {})
    with code_cached(first):
        kept = first.compile(GENERATED, "<kernelpolicy select>")
    assert first.compiled == 1
    second = CodeCache(place)
    with code_cached(second):
        reused = second.compile(GENERATED, "<kernelpolicy select>")
        other_name = second.compile(GENERATED, "<kernelpolicy gate>")
    assert (second.reused, second.compiled) == (1, 1)  # the file name is part of the key
    assert reused.co_filename == "<kernelpolicy select>"
    assert other_name.co_filename == "<kernelpolicy gate>"
    for code in (outside, kept, reused):
        scope: dict[str, object] = {}
        exec(code, scope)
        pick = scope["pick"]
        assert callable(pick)
        assert (pick("torch"), pick("torch", batch=512)) == ("torch", "triton")


def test_past_the_entry_limit_a_write_keeps_what_its_process_used(place: Path) -> None:
    """Texts of other packs or edited code pile up only to MAX_CODE_CACHE_ENTRIES: then the
    file keeps what the writing process used, and never more than the limit (a reader refuses
    a larger file whole)."""
    from kernelpolicy.limits import MAX_CODE_CACHE_ENTRIES

    old = CodeCache(place)
    with code_cached(old):
        for n in range(MAX_CODE_CACHE_ENTRIES - 10):
            old.compile(f"x = {n}", "<old>")
    busy = CodeCache(place)
    with code_cached(busy):
        for n in range(20):
            busy.compile(f"y = {n}", "<new>")
        busy.compile("x = 0", "<old>")
    assert busy.reused == 1
    after = CodeCache(place)
    with code_cached(after):
        assert len(after.codes) == 21
    flood = CodeCache(place)
    with code_cached(flood):
        for n in range(MAX_CODE_CACHE_ENTRIES + 5):
            flood.compile(f"z = {n}", "<flood>")
    last = CodeCache(place)
    with code_cached(last):
        assert len(last.codes) == MAX_CODE_CACHE_ENTRIES


def test_texts_are_kept_under_their_key_only_while_held(place: Path) -> None:
    first = CodeCache(place)
    first.keep_text("translation of x", "x > 1")
    assert first.text("translation of x") is None  # not held: nothing kept, nothing read
    with code_cached(first):
        assert first.text("translation of x") is None
        first.keep_text("translation of x", "x > 1")
    second = CodeCache(place)
    with code_cached(second):
        assert second.text("translation of x") == "x > 1"
        assert second.text("translation of y") is None
        assert second.compile("x > 1", "<f>").co_filename == "<f>"  # a text is never code
    assert second.reused == 1


def _child(code: str, **variables: str) -> list[str]:
    """The words a fresh interpreter running ``code`` prints, with none of kernelpolicy's
    settings in its environment but ``variables``."""
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    return subprocess.run(
        [sys.executable, "-c", code], env={**env, **variables}, check=True, capture_output=True,
        text=True,
    ).stdout.split()  # fmt: skip


def test_a_second_process_takes_the_verified_translations(tmp_path: Path) -> None:
    """The H100's rules translated to Python and verified against CEL once per node: the next
    process takes the translations, loads no CEL extension, and selects the same."""
    h100 = ROOT / "kernelpolicy" / "fixtures" / "platforms" / "h100-real.json"
    code = (
        "import sys, kernelpolicy; "
        f"r = kernelpolicy.resolve(platform=kernelpolicy.load_platform({str(h100)!r})); "
        "picks = [r.select('sampler.top_k_top_p', has_generators=g, has_top_k=True, "
        "has_top_p=True, logprobs_mode=m, batch=b, dtype='bfloat16') "
        "for g in (False, True) for m in ('raw_logprobs', 'processed_logits') for b in (1, 512)]; "
        "print('cel.cel' in sys.modules, ','.join(picks))"
    )
    runs = [_child(code, KERNELPOLICY_CACHE_DIR=str(tmp_path)) for _ in range(2)]
    assert runs[0][0] == "True"
    assert runs[1][0] == "False"
    assert runs[1][1] == runs[0][1]


def test_a_directory_keeps_the_newest_files(tmp_path: Path) -> None:
    """One file per interpreter build and kernelpolicy version; the newest CODE_FILES stay."""
    from kernelpolicy.code_cache import CODE_FILES

    for n in range(CODE_FILES + 2):
        with code_cached(CodeCache(tmp_path / "code" / f"tag{n}.marshal")) as cache:
            cache.compile("x = 1", "<f>")
    assert len(list((tmp_path / "code").glob("*.marshal"))) == CODE_FILES


def test_the_hook_is_in_place_only_while_held_and_never_over_another() -> None:
    cache = CodeCache(Path("/nonexistent/code/tag.marshal"))
    assert "exec" not in vars(dataclasses)
    with code_cached(cache), code_cached(cache):
        assert vars(dataclasses)["exec"] == cache.exec
    assert "exec" not in vars(dataclasses)
    theirs = exec
    dataclasses.exec = theirs  # type: ignore[attr-defined]
    try:
        with code_cached(cache):
            assert vars(dataclasses)["exec"] is theirs
        assert vars(dataclasses)["exec"] is theirs
    finally:
        del dataclasses.exec  # type: ignore[attr-defined]
    off = CodeCache(None)  # KERNELPOLICY_PACK_CACHE=0, or no usable directory
    with code_cached(off):
        assert "exec" not in vars(dataclasses)


def _other_interpreter(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data.replace(b"tag\n", b"gat\n", 1))


def _truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:200])


def _not_code(path: Path) -> None:
    header, _ = path.read_bytes().split(b"\n", 1)
    codes = {"def __create_fn__(): pass": "print('planted')"}
    path.write_bytes(header + b"\n" + marshal.dumps(codes))


def _text_for_code(path: Path) -> None:
    header, _ = path.read_bytes().split(b"\n", 1)
    path.write_bytes(header + b"\n" + marshal.dumps({"<f>\0x = 1": "x = 1"}))


def _not_marshal(path: Path) -> None:
    header, _ = path.read_bytes().split(b"\n", 1)
    path.write_bytes(header + b"\n" + json.dumps({"a": 1}).encode())


def _too_large(path: Path) -> None:
    from kernelpolicy.limits import MAX_CODE_CACHE_BYTES

    with path.open("ab") as handle:
        handle.write(b"\0" * MAX_CODE_CACHE_BYTES)


PLANTED: dict[str, Callable[[Path], None]] = {
    **UNTRUSTED_ENTRIES,
    "another interpreter's": _other_interpreter,
    "truncated": _truncated,
    "values that are not code": _not_code,
    "a text where code belongs": _text_for_code,
    "not marshal": _not_marshal,
    "over MAX_CODE_CACHE_BYTES": _too_large,
}


@pytest.mark.parametrize("name", PLANTED)
def test_a_file_that_may_not_be_used_is_ignored(name: str, place: Path) -> None:
    """Nothing from such a file runs: the methods are compiled from the text, the class is
    right, and nothing is raised."""
    plain = _behaviour(_make_class("kernelpolicy._test_dataclass_cache"))
    first = _filled(place)
    PLANTED[name](place)
    cache = CodeCache(place)
    with code_cached(cache):
        made = _behaviour(_make_class("kernelpolicy._test_dataclass_cache"))
    assert made == plain
    assert (cache.reused, cache.compiled) == (0, first.compiled)


@pytest.mark.parametrize(
    ("name", "variables"),
    [
        ("the validated caches off", {"KERNELPOLICY_PACK_CACHE": "0"}),
        ("a relative cache directory", {"KERNELPOLICY_CACHE_DIR": "cache"}),
        ("a named directory that does not exist", {"KERNELPOLICY_CACHE_DIR": "/not/there"}),
        ("an unreadable switch", {"KERNELPOLICY_PACK_CACHE": "perhaps"}),
    ],
)  # fmt: skip
def test_no_cache_where_the_settings_give_none(name: str, variables: dict[str, str]) -> None:
    assert cache_place(variables) is None


def test_the_place_variables_are_the_settings_variables() -> None:
    from kernelpolicy.code_cache import PLACE_VARIABLES
    from kernelpolicy.settings.readers import variable

    assert (variable("pack_cache"), variable("cache_dir")) == PLACE_VARIABLES


def test_the_default_place_makes_no_class_before_the_hook(tmp_path: Path) -> None:
    """Finding the default place imports nothing that makes a dataclass (their methods are
    what the cache keeps: one made before it is loaded is compiled in every process)."""
    code = (
        "import sys, dataclasses; made = []; real = dataclasses._process_class\n"
        "def spy(cls, *a, **k):\n    made.append(cls.__qualname__); return real(cls, *a, **k)\n"
        "dataclasses._process_class = spy\n"
        "from kernelpolicy.code_cache import process_cache; print(process_cache().place, made)"
    )
    out = _child(code, XDG_CACHE_HOME=str(tmp_path))
    assert out[0].startswith(str(tmp_path / "kernelpolicy" / "code"))
    assert out[1] == "[]"


def test_cache_place_is_under_the_cache_directory(tmp_path: Path) -> None:
    found = cache_place({"KERNELPOLICY_CACHE_DIR": str(tmp_path)})
    assert found is not None
    assert found.parent == tmp_path / "code"
    assert found.suffix == ".marshal"


def _child_counts(cache: Path) -> Iterator[list[str]]:
    code = (
        "import kernelpolicy; kernelpolicy.resolve(); "
        "from kernelpolicy.code_cache import process_cache; c = process_cache(); "
        "print(c.compiled, c.reused)"
    )
    for _ in range(2):
        yield _child(code, KERNELPOLICY_CACHE_DIR=str(cache))


def test_a_second_process_compiles_none_of_resolves_methods(tmp_path: Path) -> None:
    """The point: a node's first resolve() compiles the methods of every class it makes (and
    of those its pack validation makes), the next process's compiles none."""
    (first_compiled, first_reused), (compiled, reused) = _child_counts(tmp_path)
    assert int(first_compiled) > 100
    assert first_reused == "0"
    assert compiled == "0"
    assert 100 < int(reused) <= int(first_compiled)
