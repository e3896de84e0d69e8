"""In someone else's process, kernelpolicy logs through the standard logging module."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from collections.abc import Iterator

import pytest

from kernelpolicy.api import resolve
from kernelpolicy.logs import LOGGER_NAME
from tests.helpers import ROOT, fixture
from tests.log_helpers import Collect, host_logging


@pytest.fixture
def host() -> Iterator[Collect]:
    """The host configures the ``kernelpolicy`` logger as it would any library's."""
    with host_logging(Collect()) as handler:
        yield handler


@pytest.mark.parametrize(
    ("machine", "env", "level"),
    [
        pytest.param("cpu", {}, "INFO", id="clean-is-info"),
        pytest.param("mi300x", {"VLLM_ROCM_USE_AITER": "1"}, "WARNING", id="fallback-is-warning"),
        pytest.param("cpu", {"VLLM_ROCM_USE_AITER": "maybe"}, "ERROR", id="bad-env-is-error"),
    ],
)
def test_resolution_event_goes_to_the_kernelpolicy_logger(
    host: Collect, machine: str, env: dict[str, str], level: str
) -> None:
    """One record per resolve(), at the level the decisions call for, with its fields."""
    resolution = resolve(fixture(machine), {"KERNELPOLICY_LOG_FORMAT": "console", **env})
    (record,) = host.records
    assert (record.name, record.levelname) == ("kernelpolicy", level)
    assert record.getMessage().startswith("event='kernelpolicy.resolved'")
    fields = record.kernelpolicy  # type: ignore[attr-defined]
    assert fields["fingerprint"] == resolution.fingerprint
    assert fields["decisions"]["sampler.top_k_top_p"]


def test_host_level_decides(host: Collect) -> None:
    """The host's level filters kernelpolicy's events like any other library's."""
    logging.getLogger(LOGGER_NAME).setLevel(logging.WARNING)
    resolve(fixture("cpu"), {"KERNELPOLICY_LOG_FORMAT": "json"})  # info: filtered out
    assert host.records == []
    resolve(fixture("mi300x"), {"KERNELPOLICY_LOG_FORMAT": "json", "VLLM_ROCM_USE_AITER": "1"})
    (record,) = host.records
    assert json.loads(record.getMessage())["event"] == "kernelpolicy.resolved"


def test_runtime_fallback_is_a_warning(host: Collect) -> None:
    """A chosen kernel that cannot load here logs a warning naming the feature (loading the
    next candidate, triton, may add notes of degradations earlier tests of this process left:
    they are process-wide)."""
    resolution = resolve(fixture("h100-sxm"), {"KERNELPOLICY_LOG_FORMAT": "json"})
    host.records.clear()
    resolution.impl("sampler.top_k_top_p")  # flashinfer is not installed here
    events = [(r.levelname, json.loads(r.getMessage())) for r in host.records]
    (level, event), *_ = [
        e for e in events if "flashinfer cannot be loaded" in e[1].get("note", "")
    ]
    assert level == "WARNING"
    assert (event["event"], event["feature"]) == (
        "kernelpolicy.runtime_fallback",
        "sampler.top_k_top_p",
    )
    assert event["note"].endswith("the calls routed to it go to the next candidate")


def test_a_host_stream_handler_gets_the_event(host: Collect) -> None:
    """A plain StreamHandler the host adds prints the rendered event."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logging.getLogger(LOGGER_NAME).addHandler(handler)
    try:
        resolve(fixture("cpu"), {"KERNELPOLICY_LOG_FORMAT": "console"})
    finally:
        logging.getLogger(LOGGER_NAME).removeHandler(handler)
    assert "kernelpolicy.resolved" in stream.getvalue()


_HOST = """\
import sys
{configure}
import kernelpolicy
from kernelpolicy.platform.fixtures import fixture_dir
p = lambda n: kernelpolicy.load_platform(fixture_dir() / f'platforms/{{n}}.json')
kernelpolicy.resolve(p('cpu'), env={{'KERNELPOLICY_LOG_FROMAT': 'json'}})  # misspelt: a warning
kernelpolicy.resolve(p('mi300x'), env={{'VLLM_ROCM_USE_AITER': '1'}})
r = kernelpolicy.resolve(p('h100-sxm'), env={{}})
r.impl('sampler.top_k_top_p')  # flashinfer is not installed: a runtime fallback warning
"""


@pytest.mark.parametrize(
    ("configure", "shown"),
    [
        pytest.param("", 0, id="never-imports-logging"),
        pytest.param("import logging", 0, id="imports-logging-configures-nothing"),
        pytest.param(
            "import logging; logging.getLogger('other').warning('x')", 0,
            id="another-library-logs-first",
        ),
        pytest.param("import logging; logging.basicConfig()", 4, id="basic-config-warnings"),
        pytest.param(
            "import logging; logging.basicConfig(level=logging.INFO)", 5, id="basic-config-info"
        ),
        pytest.param(
            "import logging; logging.basicConfig(level=logging.ERROR)", 0, id="errors-only"
        ),
    ],
)  # fmt: skip
def test_library_is_silent_until_the_host_configures_logging(configure: str, shown: int) -> None:
    """resolve() (a misspelt KERNELPOLICY_* variable in its environment included) and a runtime
    fallback print nothing to an unconfigured host's stderr (a NullHandler on the package
    logger); once the host configures logging, its level decides."""
    done = subprocess.run(
        [sys.executable, "-c", _HOST.format(configure=configure)],
        check=False, capture_output=True, text=True, cwd=ROOT, timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    ours = [line for line in done.stderr.splitlines() if "kernelpolicy." in line]
    assert len(ours) == shown, done.stderr
    if not shown:
        assert "kernelpolicy" not in done.stderr


def test_package_logger_has_a_null_handler(host: Collect) -> None:
    """The standard library's convention for a library: a NullHandler on its logger."""
    resolve(fixture("cpu"), {})
    handlers = logging.getLogger(LOGGER_NAME).handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)
