"""Environment values: only the variables the policies read are carried, and only cut.

Every place a value is shown (decision reasons and errors, ``explain --json``, the answer's
inputs, decision logs, the platform snapshot, probe errors) gets it from the engine's carried
form, so a long or secret value never leaks past ``SHOWN_ENV_VALUE_CHARS``, and one over
``MAX_ENV_VALUE_CHARS`` is not carried at all.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

import kernelpolicy
from kernelpolicy.cli import main
from kernelpolicy.engine.decide import resolve_policies
from kernelpolicy.engine.resolution import Resolution
from kernelpolicy.errors import SettingsError
from kernelpolicy.limits import MAX_ENV_VALUE_CHARS, SHOWN_ENV_VALUE_CHARS
from kernelpolicy.logs import log_resolution
from kernelpolicy.platform.model import Platform, load_platform
from kernelpolicy.testing import FakeNVML
from kernelpolicy.testing.machines import H100_SXM

SWITCH = "VLLM_USE_FLASHINFER_SAMPLER"  # read by the bundled sampler.top_k_top_p policy
FEATURE = "sampler.top_k_top_p"
TAIL = "TAILSECRET"  # ends every long value; it must never be shown
OFF = {"KERNELPOLICY_LOG_FORMAT": "off"}


@pytest.fixture
def h100(fixtures: Path) -> Platform:
    return load_platform(fixtures / "platforms/h100-sxm.json")


def _value(length: int) -> str:
    return "y" * (length - len(TAIL)) + TAIL


def _everything_shown(resolution: Resolution) -> str:
    """Every text a user or client can see of a resolution, in one string."""
    logs = io.StringIO()
    log_resolution(resolution.log_fields(), "json", logs)
    log_resolution(resolution.log_fields(), "console", logs)
    return "\n".join(
        [
            json.dumps(resolution.to_dict()),
            json.dumps(resolution.env),
            json.dumps(resolution.overrides),
            resolution.platform.to_json(),
            logs.getvalue(),
            repr(resolution),
        ]
    )


@pytest.mark.parametrize(
    ("length", "error"),
    [
        pytest.param(SHOWN_ENV_VALUE_CHARS + 1, "is not a boolean", id="shown-limit-plus-one"),
        pytest.param(5_000 - 904, "is not a boolean", id="a-few-kib"),
        pytest.param(MAX_ENV_VALUE_CHARS, "is not a boolean", id="max-at-limit"),
        pytest.param(
            MAX_ENV_VALUE_CHARS + 1,
            f"{SWITCH}: a value of {MAX_ENV_VALUE_CHARS + 1} characters is over "
            f"MAX_ENV_VALUE_CHARS ({MAX_ENV_VALUE_CHARS}) and was not read",
            id="max-limit-plus-one",
        ),
        pytest.param(
            500_000,
            f"{SWITCH}: a value of 500000 characters is over MAX_ENV_VALUE_CHARS",
            id="half-a-megabyte",
        ),
    ],
)
def test_long_switch_values_are_cut_everywhere(length: int, error: str, h100: Platform) -> None:
    """The switch becomes an error naming the variable (and the limit past it); the end of the
    value appears nowhere, and past MAX_ENV_VALUE_CHARS not even its start does."""
    value = _value(length)
    resolution = kernelpolicy.resolve(h100, {SWITCH: value, **OFF})
    decision = resolution.decision(FEATURE)
    assert decision.error is not None
    assert error in decision.error
    shown = _everything_shown(resolution)
    assert TAIL not in shown
    baseline = _everything_shown(kernelpolicy.resolve(h100, {SWITCH: "x", **OFF}))
    assert len(shown) < len(baseline) + 3000  # the cut value, in a few places at most
    if length > MAX_ENV_VALUE_CHARS:
        assert "y" * 10 not in shown
    else:
        assert f"...(cut, {length} chars)" in decision.error


def test_short_values_are_shown_whole(h100: Platform) -> None:
    """A value of SHOWN_ENV_VALUE_CHARS characters is shown as it is."""
    value = "z" * (SHOWN_ENV_VALUE_CHARS - 3) + "END"
    resolution = kernelpolicy.resolve(h100, {SWITCH: value, "KERNELPOLICY_LOG_FORMAT": "off"})
    assert value in (resolution.decision(FEATURE).error or "")
    assert resolution.env == {SWITCH: value}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param(
            "t" * (MAX_ENV_VALUE_CHARS + 1),
            "KERNELPOLICY_FORCE_SAMPLER_GREEDY: a value of 4097 characters is over "
            "MAX_ENV_VALUE_CHARS (4096) and was not read; expected one of",
            id="over-limit",
        ),
        pytest.param(
            "t" * 100 + TAIL,
            f"KERNELPOLICY_FORCE_SAMPLER_GREEDY='{'t' * SHOWN_ENV_VALUE_CHARS}...(cut, 110 chars)'"
            " is not an implementation of sampler.greedy",
            id="cut",
        ),
    ],
)
def test_long_forced_implementations(value: str, message: str, h100: Platform) -> None:
    """A forced implementation's value is carried and shown the same way: in resolve()'s
    SettingsError (it names no implementation), and in the engine's decision error where
    such a force reaches the engine (a daemon's reload, whose forces were checked at start)."""
    env = {"KERNELPOLICY_FORCE_SAMPLER_GREEDY": value, "KERNELPOLICY_LOG_FORMAT": "off"}
    with pytest.raises(SettingsError) as error:
        kernelpolicy.resolve(h100, env)
    assert message in str(error.value)
    assert TAIL not in str(error.value)
    policies = kernelpolicy.resolve(h100, OFF).policies
    resolution = resolve_policies(h100, env, policies, {})
    assert message in (resolution.decision("sampler.greedy").error or "")
    assert TAIL not in _everything_shown(resolution)


def test_only_variables_the_policies_read_are_carried(h100: Platform) -> None:
    """Settings, secrets and variables no policy reads are never captured, logged or sent
    (this machine is probed through the public API, which captures what the policies read)."""
    env = {
        "AWS_SECRET_ACCESS_KEY": "secret-aws",
        "KERNELPOLICY_TLS_KEY_FILE": "/secret/key.pem",
        "CUDA_VISIBLE_DEVICES": "secret-visible",
        "KERNELPOLICY_LOG_FORMAT": "off",
        SWITCH: "1",
    }
    probed = kernelpolicy.resolve(None, env)
    assert probed.platform.env == {SWITCH: "1"}
    for resolution in (probed, kernelpolicy.resolve(h100, env)):
        assert resolution.env == {SWITCH: "1"}
        assert "secret" not in _everything_shown(resolution)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("1", id="true"),
        pytest.param(" 0 ", id="false-padded"),
        pytest.param("maybe", id="not-boolean"),
        pytest.param("m" * 100, id="cut"),
        pytest.param("m" * (MAX_ENV_VALUE_CHARS + 1), id="not-carried"),
    ],
)
def test_rebuilt_from_carried_inputs_decides_the_same(value: str, h100: Platform) -> None:
    """A client rebuilding the resolution from what an answer carries (platform, env, overrides)
    gets the same decisions, reasons and fingerprint: the carried form is stable."""
    env = {SWITCH: value, "KERNELPOLICY_FORCE_MHC": value, "KERNELPOLICY_LOG_FORMAT": "off"}
    # Straight to the engine: resolve() refuses a force that names no implementation.
    first = resolve_policies(h100, env, kernelpolicy.resolve(h100, OFF).policies, {})
    again = resolve_policies(
        Platform.from_dict(first.platform.to_dict()), first.env, first.policies, first.overrides
    )
    assert again.fingerprint == first.fingerprint
    assert again.to_dict() == first.to_dict()
    from kernelpolicy.platform.envvars import carried

    assert carried(carried(value)) == carried(value)


def test_visible_devices_errors_are_cut(empty_root: Path) -> None:
    """A long CUDA_VISIBLE_DEVICES that names no device is cut in the probe error."""
    value = "9" * 10_000 + TAIL
    platform = kernelpolicy.probe(
        root=empty_root, nvml=FakeNVML([H100_SXM]), amdsmi=None,
        environ={"CUDA_VISIBLE_DEVICES": value}, metadata=lambda name: None,
    )  # fmt: skip
    assert platform.devices == ()
    assert TAIL not in " ".join(platform.probe_errors)
    assert len(platform.probe_errors[0]) < 400


def test_explain_json_of_a_huge_value_is_small(
    fixtures: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``explain --json`` with a 500 KB value prints the document it prints for a one-character
    value, give or take the error line: no part of the value."""
    snapshot = str(fixtures / "platforms/h100-sxm.json")
    main(["explain", "--platform", snapshot, "--env", f"{SWITCH}=x", "--json"])
    baseline = capsys.readouterr().out
    code = main(
        ["explain", "--platform", snapshot, "--env", f"{SWITCH}={_value(500_000)}", "--json"]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert json.loads(out)["decisions"][FEATURE]["error"].startswith(f"{SWITCH}: a value of")
    assert TAIL not in out
    assert len(out) < len(baseline) + 1000


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("m" * 100 + TAIL, id="cut"),
        pytest.param("m" * (MAX_ENV_VALUE_CHARS + 1) + TAIL, id="not-carried"),
    ],
)
def test_daemon_inputs_carry_the_cut_value_and_rebuild(value: str, h100: Platform) -> None:
    """What the daemon sends as a Resolve answer's inputs (its own converter, unchanged) holds
    the carried value, never the tail, and a client rebuilds the same resolution from it."""
    pytest.importorskip("grpc")
    from kernelpolicy.server.convert import inputs_message, rebuild

    resolution = kernelpolicy.resolve(h100, {SWITCH: value, **OFF})
    sources = [(name, Path(name).read_text()) for name in resolution.policies.files]
    inputs = inputs_message(resolution, sources, None)
    assert TAIL not in str(inputs)
    assert dict(inputs.env) == resolution.env
    rebuilt = rebuild(inputs)
    assert rebuilt.fingerprint == resolution.fingerprint
    assert rebuilt.to_dict() == resolution.to_dict()
