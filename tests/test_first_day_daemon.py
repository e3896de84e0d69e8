"""A daemon whose decisions include an error says so (first-day review, finding 3): ``status``
exits 1 as ``explain --address`` does (the errors of every model and of --model-kind, default
mha), and ``serve`` says each such error at start, ``--quiet`` included; with JSON logs every
line ``serve`` writes on stderr is JSON (finding 14); ``status --clear-halt`` of a feature the
daemon does not define names the close ones (finding 11)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from contextlib import ExitStack
from types import SimpleNamespace

import pytest

from kernelpolicy.cli import main
from kernelpolicy.cli.serve_cmd import _Started
from kernelpolicy.testing.daemon import running_daemon
from tests.helpers import ROOT, fixture, resolve_on

pytestmark = pytest.mark.xdist_group("first-day-daemon")

FORCED = {"KERNELPOLICY_FORCE_SAMPLER_GREEDY": "aiter"}  # not supported on an NVIDIA GPU
DAEMONS = {"h100-forced": ("h100-sxm", FORCED), "mi300x": ("mi300x", {}), "h100": ("h100-sxm", {})}
GREEDY_ERROR = "kernelpolicy: exit 1: sampler.greedy is an error (required_unsupported)"
SPARSE = "sparse_attn_indexer is an error for mla-sparse models only (no_implementation)"


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Name -> the unix address of a real daemon in this process, one per entry of DAEMONS."""
    directory = tmp_path_factory.mktemp("run")
    with ExitStack() as stack:
        addresses = {}
        for name, (platform, env) in DAEMONS.items():
            address = f"unix:{directory / name}.sock"
            stack.enter_context(running_daemon(fixture(platform), [ROOT / "policies"], env,
                                               listen=[address], watch=False))  # fmt: skip
            addresses[name] = address
        yield addresses


@pytest.mark.parametrize(
    ("daemon", "argv", "code", "stderr"),
    [
        pytest.param("h100-forced", [], 1, [GREEDY_ERROR], id="error-for-every-model"),
        pytest.param("mi300x", [], 0, [f"kernelpolicy: note: {SPARSE}; not counted in the "
                                       "exit status (--model-kind mla-sparse counts it)"],
                     id="another-kinds-error-not-counted"),
        pytest.param("mi300x", ["--model-kind", "mla-sparse"], 1,
                     ["kernelpolicy: exit 1: sparse_attn_indexer is an error for mla-sparse "
                      "models (no_implementation)"], id="model-kind-counts-it"),
        pytest.param("h100", [], 0, [], id="healthy"),
    ],
)  # fmt: skip
def test_status_exits_as_explain_address_does(
    daemons: dict[str, str],
    daemon: str,
    argv: list[str],
    code: int,
    stderr: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """status's exit status and stderr lines are those explain --address gives the same
    daemon (cli.exits.report_exit's); before, status exited 0 with a decision error."""
    assert main(["status", "--address", daemons[daemon], *argv]) == code
    assert capsys.readouterr().err.splitlines() == stderr


@pytest.mark.parametrize(
    ("feature", "as_json", "expected"),
    [
        pytest.param("sampler.gredy", False, "unknown feature 'sampler.gredy'; did you mean "
                     "'sampler.greedy'?; the daemon's policies define: sampler.top_k_top_p, "
                     "sampler.greedy, ", id="typo"),
        pytest.param("allreduce_rmsnorm.one_stage", True, "did you mean 'allreduce_rmsnorm'?; "
                     "the daemon's policies define: ", id="a-gate-json"),
        pytest.param("zzz", False, "unknown feature 'zzz'; the daemon's policies define: "
                     "sampler.top_k_top_p, ", id="nothing-close"),
    ],
)  # fmt: skip
def test_clear_halt_of_an_unknown_feature_names_the_close_ones(
    daemons: dict[str, str],
    feature: str,
    as_json: bool,
    expected: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The daemon's 'unknown feature' gains did-you-mean and its features (--json's error too)."""
    argv = ["status", "--address", daemons["h100"], "--clear-halt", feature]
    assert main([*argv, "--json"] if as_json else argv) == 2
    captured = capsys.readouterr()
    assert expected in (json.loads(captured.out)["error"] if as_json else captured.err)


ERROR_EVENT = {"event": "kernelpolicy.serve.decision_error", "level": "error",
               "feature": "sampler.greedy", "error_code": "required_unsupported"}  # fmt: skip
SERVING = {"event": "kernelpolicy.serve.serving", "level": "info", "addresses": ["unix:/x.sock"]}


@pytest.mark.parametrize(
    ("platform", "env", "log_format", "quiet", "lines"),
    [
        pytest.param("h100-sxm", FORCED, "json", True, [ERROR_EVENT], id="json-quiet"),
        pytest.param("h100-sxm", FORCED, "json", False, [ERROR_EVENT, SERVING], id="json"),
        pytest.param("h100-sxm", {}, "json", False, [SERVING], id="json-healthy"),
        pytest.param("mi300x", {}, "json", False,
                     [{"event": "kernelpolicy.serve.decision_error", "level": "info",
                       "feature": "sparse_attn_indexer", "model_kind": "mla-sparse"}, SERVING],
                     id="json-another-kinds-error-at-info"),
        pytest.param("mi300x", {}, "json", True, [], id="json-quiet-another-kinds-error"),
        pytest.param("h100-sxm", FORCED, "console", True,
                     ["[error    ] kernelpolicy.serve.decision_error", "feature=sampler.greedy"],
                     id="console-quiet"),
        pytest.param("h100-sxm", FORCED, "off", True,
                     ["kernelpolicy: error: sampler.greedy: KERNELPOLICY_FORCE_SAMPLER_GREEDY="
                      "aiter forces aiter, which is not supported here"], id="log-off-quiet"),
        pytest.param("h100-sxm", {}, "console", False, ["serving on unix:/x.sock"],
                     id="console-healthy"),
    ],
)  # fmt: skip
def test_serve_says_decision_errors_at_start(
    platform: str,
    env: dict[str, str],
    log_format: str,
    quiet: bool,
    lines: list[object],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """What serve writes on stderr once listening: each decision error (an error event for
    every model's, info for another kind's, none of those with --quiet), then where it serves;
    with JSON logs, every line a JSON object."""
    resolution = resolve_on(platform, KERNELPOLICY_LOG_FORMAT="off", **env)
    state = SimpleNamespace(snapshot=SimpleNamespace(resolution=resolution))
    daemon = SimpleNamespace(log_format=log_format, state=state)
    args = argparse.Namespace(port_file=None, quiet=quiet)
    started = _Started(args, daemon, lambda: "the table")
    started._publish(["unix:/x.sock"])
    assert started.failed == []
    captured = capsys.readouterr()
    assert captured.out == ("" if quiet else "the table\n\n")
    said = captured.err.splitlines()
    if log_format == "json":
        events = [json.loads(line) for line in said]
        assert [{k: e.get(k) for k in want} for e, want in zip(events, lines, strict=True)] == (
            lines
        )
    elif lines:
        assert len(said) == 1, said
        assert all(str(part) in said[0] for part in lines), said
    else:
        assert said == []
