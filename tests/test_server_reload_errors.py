"""A reload whose new decisions hold an error says so in its log event, as serve says one at
start: ``kernelpolicy.reload`` at error level with ``decision_errors`` for a feature every model
uses (even with ``quiet``), ``model_kind_errors`` for one kind of model's, info otherwise."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from kernelpolicy.testing.daemon import running_daemon
from tests.helpers import ROOT, fixture

GREEDY_OFF = """schema = "kernelpolicy.policy/v1"
[[disable]]
feature = "sampler.greedy"
impl = "torch"
reason = "an operator switched the last greedy kernel off"
"""
NOTE = 'schema = "kernelpolicy.policy/v1"\n# a note: nothing changes\n'


@pytest.mark.parametrize(
    ("platform", "added", "quiet", "level", "errors", "kinds"),
    [
        pytest.param("h100-sxm", GREEDY_OFF, False, "error", ["sampler.greedy"], None,
                     id="every-model-error"),
        pytest.param("h100-sxm", GREEDY_OFF, True, "error", ["sampler.greedy"], None,
                     id="every-model-error-even-quiet"),
        pytest.param("h100-sxm", NOTE, False, "info", None, None, id="healthy"),
        pytest.param("h100-sxm", NOTE, True, None, None, None, id="healthy-quiet-says-nothing"),
        pytest.param("mi300x", NOTE, False, "info", None, ["sparse_attn_indexer"],
                     id="one-kind-of-model-keeps-the-level"),
    ],
)  # fmt: skip
def test_the_reload_event_names_its_decision_errors(
    tmp_path: Path,
    platform: str,
    added: str,
    quiet: bool,
    level: str | None,
    errors: list[str] | None,
    kinds: list[str] | None,
) -> None:
    policies = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", policies)
    log = io.StringIO()
    with running_daemon(
        fixture(platform), [policies], watch=False, log_format="json", log_stream=log
    ) as running:
        running.daemon.quiet = quiet  # serve --quiet
        (policies / "95-ops.toml").write_text(added)
        running.call(running.daemon.reload("test"))
    events = [json.loads(line) for line in log.getvalue().splitlines() if line]
    reloads = [e for e in events if e.get("event") == "kernelpolicy.reload"]
    if level is None:
        assert reloads == []
        return
    (event,) = reloads
    assert event["level"] == level
    assert sorted(event.get("decision_errors") or []) == (errors or [])
    assert sorted(event.get("model_kind_errors") or []) == (kinds or [])
