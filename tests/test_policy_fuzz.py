"""Fuzzed policy files: whatever the bytes, one PolicyError with located issues, never a crash."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelpolicy.errors import PolicyError
from kernelpolicy.policy import load_policy_text

PACK = Path(__file__).resolve().parent.parent / "policies"
DOCUMENTS = [p.read_text() for p in sorted(PACK.glob("*.toml"))]

# TOML values of every kind, to put where a policy expects something specific.
scalars = st.one_of(
    st.text(max_size=12).map(json.dumps),
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(
        [
            "true",
            "false",
            '">=0.1"',
            '"=>1"',
            '"*"',
            '"auto"',
            '"on"',
            '"gfx942"',
            '"sm_90"',
            '"!x"',
            '"1 +"',
            '"a && b"',
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.dictionaries(
            st.sampled_from(["env", "version", "impl", "x", "true", "unset"]), inner, max_size=3
        ).map(lambda d: "{ " + ", ".join(f"{k} = {v}" for k, v in d.items()) + " }"),
    ),
    max_leaves=6,
)


def _assert_clear(text: str) -> None:
    try:
        load_policy_text(text, "fuzz.toml")
    except PolicyError as exc:
        issues = exc.issues
    else:
        return
    assert issues
    for issue in issues:
        assert issue.file == "fuzz.toml"
        assert issue.message.strip()
        assert "Traceback" not in str(issue)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=st.sampled_from(DOCUMENTS), data=st.data())
def test_replaced_values(doc: str, data: st.DataObject) -> None:
    """Any value of any key replaced by any TOML value gives a clear error or a valid set."""
    lines = doc.splitlines()
    assignments = [
        i
        for i, line in enumerate(lines)
        if "=" in line and not line.lstrip().startswith(("#", "["))
    ]
    index = data.draw(st.sampled_from(assignments))
    key = lines[index].split("=", 1)[0]
    lines[index] = f"{key}= {data.draw(values)}"
    _assert_clear("\n".join(lines))


@settings(max_examples=150, deadline=None)
@given(doc=st.sampled_from(DOCUMENTS), data=st.data())
def test_deleted_and_duplicated_lines(doc: str, data: st.DataObject) -> None:
    """Deleting or duplicating any lines gives a clear error or a valid set."""
    lines = doc.splitlines()
    for _ in range(data.draw(st.integers(1, 3))):
        index = data.draw(st.integers(0, len(lines) - 1))
        if data.draw(st.booleans()):
            del lines[index]
        else:
            lines.insert(index, lines[index])
    _assert_clear("\n".join(lines))


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=300))
def test_arbitrary_text(text: str) -> None:
    """Arbitrary text is a clear error."""
    _assert_clear(text)


@settings(max_examples=100, deadline=None)
@given(
    doc=st.sampled_from(DOCUMENTS),
    key=st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=10),
    value=values,
    data=st.data(),
)
def test_inserted_keys(doc: str, key: str, value: str, data: st.DataObject) -> None:
    """An inserted key anywhere gives a clear error (unknown key) or a valid set."""
    lines = doc.splitlines()
    index = data.draw(st.integers(0, len(lines)))
    lines.insert(index, f"{key} = {value}")
    _assert_clear("\n".join(lines))
