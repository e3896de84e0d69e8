"""kernelpolicy diff reads each labelled node's ``impl.<feature>`` labels as what its daemon
decided, as ``--daemons`` reads a live daemon's answers: the labels ``kernelpolicy labels``
writes, put in a ``kubectl get nodes -o json`` list, are checked against what ``--policies``
decides for that node, and a node whose labels say otherwise is named (``labels-disagree``, on
stderr and in ``--json``), its labels possibly stale; the diff does not fail for it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernelpolicy.cli import main
from kernelpolicy.engine import resolve_policies
from kernelpolicy.errors import InventoryError
from kernelpolicy.fleet import Node, diff_fleet, load_inventory
from kernelpolicy.labels import PREFIX, label_name, node_labels
from kernelpolicy.platform.model import load_platform
from kernelpolicy.policy import load_policy_text
from tests.helpers import FIXTURES, ROOT

LONG = "fleet.a_rather_long_feature_name_whose_impl_label_is_cut_short"
GONE_LONG = "fleet.another_long_feature_name_that_these_policies_do_not_have"
_FEATURE = """
[features."{name}"]
description = "{description}"
fallback = "current"
in_process = false
[[features."{name}".candidates]]
impl = "fastnv"
vendor = "nvidia"
[[features."{name}".candidates]]
impl = "current"
"""
POLICY = (
    'schema = "kernelpolicy.policy/v1"\n'
    + _FEATURE.format(name="fleet.attn", description="fastnv on NVIDIA")
    + _FEATURE.format(name=LONG, description="a feature whose impl label is cut")
    + """
[features."fleet.req"]
description = "required on NVIDIA, served only on AMD: an error there, none elsewhere"
in_process = false
required = { vendor = "nvidia", hint = "an AMD node serves it" }
[[features."fleet.req".candidates]]
impl = "amdonly"
vendor = "amd"
"""
)
WITHOUT_REQ = POLICY[: POLICY.index('\n[features."fleet.req"]')] + "\n"


def _impl(feature: str) -> str:
    return f"{PREFIX}/{label_name(f'impl.{feature}')}"


def _labels(fixture: str, policy: str = POLICY) -> dict[str, str]:
    """The labels ``kernelpolicy labels`` writes for ``fixture``'s node under ``policy``."""
    platform = load_platform(FIXTURES / f"{fixture}.json")
    return node_labels(resolve_policies(platform, platform.env, load_policy_text(policy)))


def _set(**values: str | None) -> Callable[[dict[str, str]], dict[str, str]]:
    """The labels with ``impl.<feature>`` set to each value (``None``: removed); a keyword
    names its feature with ``__`` for ``.``, or is ``long``/``gone_long``."""
    named = {"long": LONG, "gone_long": GONE_LONG}

    def edit(labels: dict[str, str]) -> dict[str, str]:
        edited = dict(labels)
        for key, value in values.items():
            label = _impl(named.get(key, key.replace("__", ".")))
            if value is None:
                edited.pop(label)
            else:
                edited[label] = value
        return edited

    return edit


def _as_is(labels: dict[str, str]) -> dict[str, str]:
    return labels


STALE = "fleet.attn: label slownv, --policies current"  # the control node's, on every run
CASES = [
    pytest.param("cpu", _as_is, None, id="labels-agree (none for fleet.req, a cut name)"),
    pytest.param("h100-sxm", _as_is, None, id="labels-agree-on-nvidia (error for fleet.req)"),
    pytest.param("cpu", _set(fleet__attn="fastnv"), "fleet.attn: label fastnv, --policies current",
                 id="one-feature-disagrees"),
    pytest.param("cpu", lambda _: _labels("cpu", WITHOUT_REQ),
                 "fleet.req: label (unset), --policies none",
                 id="written-under-policies-without-a-feature"),
    pytest.param("cpu", _set(fleet__gone="fast"), "fleet.gone: label fast, --policies (unset)",
                 id="a-label-for-a-feature-the-policies-lack"),
    pytest.param("cpu", _set(fleet__attn="error"), "fleet.attn: label error, --policies current",
                 id="error-where-the-policies-decide-an-implementation"),
    pytest.param("h100-sxm", _set(fleet__req="amdonly"),
                 "fleet.req: label amdonly, --policies error (no_implementation)",
                 id="an-implementation-where-the-policies-decide-an-error"),
    pytest.param("cpu", _set(fleet__attn="none"), "fleet.attn: label none, --policies current",
                 id="none-where-the-policies-decide-an-implementation"),
    pytest.param("cpu", _set(fleet__req="amdonly"), "fleet.req: label amdonly, --policies none",
                 id="an-implementation-where-the-policies-decide-none"),
    pytest.param("cpu", _set(long="fastnv"), f"{LONG}: label fastnv, --policies current",
                 id="a-cut-name-read-back-by-the-policies-features"),
    pytest.param("cpu", _set(long=None), f"{LONG}: label (unset), --policies current",
                 id="a-cut-name-missing"),
    pytest.param("cpu", _set(gone_long="fast"),
                 f"{label_name('impl.' + GONE_LONG).removeprefix('impl.')}: label fast, "
                 "--policies (unset)", id="a-cut-name-of-a-feature-the-policies-lack"),
]  # fmt: skip


def _kubectl(tmp_path: Path, labels: dict[str, str]) -> Path:
    """A NodeList of node ``a`` with ``labels`` and the control node ``stale``, a CPU node
    whose labels say ``slownv``, which no policy here decides."""
    stale = _set(fleet__attn="slownv")(_labels("cpu"))
    items = [
        {"metadata": {"name": name, "labels": node}}
        for name, node in (("a", labels), ("stale", stale))
    ]
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"kind": "NodeList", "items": items}))
    return path


def _diff(
    tmp_path: Path, nodes: Path, capsys: pytest.CaptureFixture[str], *flags: str
) -> tuple[int, str, str]:
    """``diff --policies POLICY --against POLICY --platforms NODES``: code, stdout, stderr."""
    (tmp_path / "p").mkdir(exist_ok=True)
    (tmp_path / "p" / "p.toml").write_text(POLICY)
    policies = str(tmp_path / "p")
    code = main(["diff", "--policies", policies, "--against", policies,
                 "--platforms", str(nodes), *flags])  # fmt: skip
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("fixture", "edit", "what"), CASES)
def test_labels_that_say_otherwise_are_named_in_the_json(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    fixture: str,
    edit: Callable[[dict[str, str]], dict[str, str]],
    what: str | None,
) -> None:
    """``--json``'s ``labels-disagree`` warning names node ``a`` with the first feature its
    labels say otherwise of, or only the control node where ``a``'s labels agree."""
    nodes = _kubectl(tmp_path, edit(_labels(fixture)))
    code, out, err = _diff(tmp_path, nodes, capsys, "--json")
    assert code == 0, err
    document: dict[str, Any] = json.loads(out)
    codes = [w["code"] for w in document["warnings"]]
    assert codes.count("labels-disagree") == 1
    assert "daemon-disagrees" not in codes
    (warning,) = [w for w in document["warnings"] if w["code"] == "labels-disagree"]
    names = ["a", "stale"] if what else ["stale"]
    assert (warning["nodes"], warning["node_names"]) == (len(names), names)
    assert f"stale: {STALE}" in warning["message"]
    assert (f"a: {what}" in warning["message"]) == (what is not None)
    assert ("a: " in warning["message"]) == (what is not None)
    assert "the labels may be stale (written under other policies" in warning["message"]


@pytest.mark.parametrize(("fixture", "edit", "what"), CASES)
def test_labels_that_say_otherwise_are_said_on_stderr(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    fixture: str,
    edit: Callable[[dict[str, str]], dict[str, str]],
    what: str | None,
) -> None:
    """The text run says the same in one stderr line, as ``--daemons`` says a daemon that
    disagrees, and leaves stdout (the comparison) as it is."""
    nodes = _kubectl(tmp_path, edit(_labels(fixture)))
    code, out, err = _diff(tmp_path, nodes, capsys)
    assert code == 0, err
    (line,) = [line for line in err.splitlines() if "say otherwise" in line]
    count = 2 if what else 1
    assert line.startswith(
        f"kernelpolicy: warning: the labels of {count} of 2 nodes say otherwise than "
        "--policies decides for them ("
    )
    assert (f"a: {what}" in line) == (what is not None)
    assert "say otherwise" not in out
    assert "0 of 2 nodes" in out


def test_the_cut_names_are_cut() -> None:
    """The cut-name cases do test cut names: both long features' labels are over 63
    characters and end in a hash."""
    for feature in (LONG, GONE_LONG):
        name = label_name(f"impl.{feature}")
        assert len(f"impl.{feature}") > 63
        assert len(name) == 63
        assert name != f"impl.{feature}"


def test_disagreeing_labels_never_fail_the_diff(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--exit-code`` exits 0 where nothing changes, whatever the labels say (a daemon that
    disagrees does not fail it either)."""
    nodes = _kubectl(tmp_path, _set(fleet__attn="fastnv")(_labels("cpu")))
    code, _, err = _diff(tmp_path, nodes, capsys, "--exit-code")
    assert code == 0
    assert "the labels of 2 of 2 nodes say otherwise" in err


def test_labels_and_daemons_disagree_alike(tmp_path: Path) -> None:
    """A node's labels and a live daemon answering the same are found on the same feature; the
    labels' warning says ``label``, the daemon's ``daemon``."""
    inventory = load_inventory(_kubectl(tmp_path, _set(fleet__attn="fastnv")(_labels("cpu"))))
    policies = load_policy_text(POLICY)
    answered = {"fleet.attn": "fastnv", LONG: "current", "fleet.req": "none"}
    daemons = [Node.of(n.name, n.platform, answered=answered) for n in inventory.nodes[:1]]
    (from_labels,) = diff_fleet(inventory.nodes[:1], policies, policies).warnings
    (from_daemon,) = diff_fleet(daemons, policies, policies).warnings
    assert (from_labels.concern.value, from_daemon.concern.value) == (
        "labels-disagree", "daemon-disagrees",
    )  # fmt: skip
    assert "a: fleet.attn: label fastnv, --policies current" in from_labels.message
    assert "a: fleet.attn: daemon fastnv, --policies current" in from_daemon.message


MANY = {f"{PREFIX}/impl.fleet.feature_{i:04}": "fastnv" for i in range(2000)}


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        pytest.param({f"{PREFIX}/impl.fleet.attn": ""}, "attn'=''", id="value-empty"),
        pytest.param({f"{PREFIX}/impl.fleet.attn": "fast nv"}, "'fast nv'",
                     id="value-not-a-label-value"),
        pytest.param({f"{PREFIX}/impl.fleet.attn": "fast\x1b[2Jnv"}, r"fast\x1b[2Jnv",
                     id="value-with-an-escape-shown-escaped"),
        pytest.param({f"{PREFIX}/impl.Fleet.attn": "current"}, "Fleet", id="not-a-feature-name"),
        pytest.param({f"{PREFIX}/impl.fleet..attn": "current"}, "fleet..attn", id="empty-part"),
        pytest.param({f"{PREFIX}/impl.fleet-attn": "current"}, "fleet-attn",
                     id="a-dash-not-a-cut-name"),
        pytest.param({f"{PREFIX}/impl." + "a" * 60: "current"}, "aaa", id="name-over-63"),
        pytest.param(MANY, "MAX_FEATURE_FILE_BYTES", id="more-than-a-feature-file-holds"),
    ],
)  # fmt: skip
def test_a_bad_impl_label_is_named(tmp_path: Path, extra: dict[str, str], expected: str) -> None:
    """An ``impl.*`` label kernelpolicy does not write is an error naming the node and the
    label (or the limit), not a value compared or printed as it is."""
    nodes = _kubectl(tmp_path, {**_labels("cpu"), **extra})
    with pytest.raises(InventoryError, match=r"items\[0\] \(a\)") as caught:
        load_inventory(nodes)
    assert expected in str(caught.value)
    assert "\x1b" not in str(caught.value)


def test_the_fleet_page_names_the_warning() -> None:
    """docs/fleet.md lists the code among diff's warnings, where diff from labels is
    described."""
    page = " ".join((ROOT / "docs" / "fleet.md").read_text().split())
    assert "`labels-disagree`" in page
    assert "`impl.<feature>` labels" in page
