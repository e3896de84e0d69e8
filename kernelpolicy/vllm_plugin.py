"""kernelpolicy's vLLM plugin: the decisions vLLM has no switch for, carried into its workers.

vLLM loads every ``vllm.general_plugins`` entry point in each of its processes (API server,
engine core, workers) before it builds a model (``vllm/plugins/__init__.py``
``load_general_plugins``). This one does nothing unless ``KERNELPOLICY_VLLM_PLUGIN=1``
(``kernelpolicy exec --engine vllm`` sets it; the settings' booleans, ``parse_bool``, and a
value that is none of them is a warning). Then, once per process, it resolves with the
inputs ``exec`` resolved with (``KERNELPOLICY_VLLM_PLUGIN_INPUTS``: the environment before
``exec`` added vLLM's settings, the platform snapshot and policy paths, read by
:func:`kernelpolicy.bridge.plugin.read_plugin_inputs`), checks that it reached the same
fingerprint (a disagreement is a warning), and installs:

* ``sampler.top_k_top_p``: vLLM's ``TopKTopPSampler`` (``forward_native``/``forward_cpu``/
  ``forward_cuda``/``forward_hip``) calls ``resolve().select()`` per call, with the call's
  batch, dtype, seeded rows, top-k/top-p presence and logprobs mode, and runs that
  implementation (its output guards included); processed-logprobs calls stay on vLLM's path.
* ``sampler.greedy``: ``Sampler.greedy_sample`` runs the policy's greedy implementation.
* both, under Model Runner V2 (vLLM's default on a GPU where Triton runs): its
  ``Sampler._sample_random`` (``vllm/v1/worker/gpu/sample/sampler.py``, 0.32.0-0.33.0) samples
  each call's rows as the V1 hooks do, its temperature-0 rows with the greedy choice
  (:mod:`kernelpolicy.vllm_sampling` holds every sampler route).
* ``rmsnorm`` (where a policy defines it): a provider named ``kernelpolicy`` for vLLM's IR ops
  ``rms_norm`` and ``fused_add_rms_norm`` (``vllm/ir/op.py`` ``register_impl``), chosen with
  ``--ir-op-priority`` (the bridge emits it).

While vLLM runs it follows the node (:mod:`kernelpolicy.following`): a policy file that
changes or a halt of the node's daemon resolves again, and the parts above use the new
decisions from the next call (one warning line per process says what changed).

It logs one line per process naming the fingerprint and what it installed. It never takes
vLLM down: any failure leaves vLLM's own path in place and says so. With
``KERNELPOLICY_VLLM_PLUGIN_STATS=DIR`` each process writes its call counts to
``DIR/<pid>.json`` (at the 1st, 2nd, 4th, 8th, ... call of each kind: a bounded cost).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernelpolicy.bridge.plugin import ENABLE, INPUTS, PluginInputs, read_plugin_inputs
from kernelpolicy.dtypes import dtype_name
from kernelpolicy.safeio import write_atomic
from kernelpolicy.settings import parse_bool

STATS = "KERNELPOLICY_VLLM_PLUGIN_STATS"
IR_PROVIDER = "kernelpolicy"
IR_OPS = ("rms_norm", "fused_add_rms_norm")

LOGGER = "vllm.plugins.kernelpolicy"


def register() -> None:
    """The entry point vLLM calls in each process; a no-op unless turned on.

    The switch takes the settings' booleans (:func:`kernelpolicy.settings.parse_bool`); a value
    that is none of them is said in the warning, and vLLM keeps its own kernels.
    """
    switch = os.environ.get(ENABLE, "")
    if not switch.strip():
        return
    log = _logger()
    try:
        if not parse_bool(ENABLE, switch):
            return
        installed, partly = _Plugin().install()
    except Exception as exc:  # never take vLLM down: its own paths stay in place
        log.warning("kernelpolicy: plugin not installed, vLLM keeps its own kernels: %s", exc)
        _placeholder_provider()
        return
    (log.warning if partly else log.info)("kernelpolicy: %s", installed)


def _placeholder_provider() -> None:
    try:
        _register_unsupported()
    except Exception as exc:  # an older vLLM without IR ops: nothing names the provider
        _logger().debug("kernelpolicy: no IR op placeholders: %s", exc)


def _logger() -> logging.Logger:
    """vLLM's own logger where it has one, so that each line carries its process prefix."""
    try:
        from vllm.logger import init_logger

        return init_logger(LOGGER)  # type: ignore[no-any-return]
    except Exception:  # an older vLLM: the standard logger under "vllm" still reaches its log
        return logging.getLogger(LOGGER)


class _Counts:
    """Calls per kind, written to the stats directory at powers of two."""

    def __init__(self, directory: str | None) -> None:
        self.path = Path(directory) / f"{os.getpid()}.json" if directory else None
        self.counts: dict[str, int] = {}

    def add(self, kind: str) -> None:
        count = self.counts.get(kind, 0) + 1
        self.counts[kind] = count
        if self.path is not None and count & (count - 1) == 0:
            try:  # never through a link planted at the path (the directory may be shared)
                write_atomic(self.path, json.dumps(self.counts).encode(), 0o644, sync=False)
            except OSError:
                self.path = None  # the directory went away: stop writing, keep serving


class _NothingToRoute(Exception):
    """A part of the plugin this vLLM does not have (no Model Runner V2): not installed, and
    nothing to warn of."""


class _Plugin:
    def __init__(self) -> None:
        from kernelpolicy.following import Following

        self.counts = _Counts(os.environ.get(STATS))
        inputs = read_plugin_inputs(os.environ.get(INPUTS, ""))  # before the heavy imports
        self.following = Following(
            lambda: _resolve(inputs), _watcher(inputs),
            changed=self.changed, failed=_follow_failed, prepare=self.prepare,
        )  # fmt: skip
        self.installed: set[str] = set()
        _check_fingerprint(self.resolution, inputs.fingerprint)

    @property
    def resolution(self) -> Any:
        """The decisions now: the node's halts and the policy files are followed while vLLM
        runs (:mod:`kernelpolicy.following`)."""
        return self.following.current

    def prepare(self, new: Any) -> None:
        """Load what the installed parts call on a new Resolution before it serves a call."""
        for part, feature in (("sampler.top_k_top_p", "sampler.top_k_top_p"),
                              ("sampler.greedy", "sampler.greedy"), ("IR", "rmsnorm"),
                              ("runner_v2", "sampler.top_k_top_p"),
                              ("runner_v2", "sampler.greedy")):  # fmt: skip
            if part in self.installed and feature in new.decisions:
                try:
                    new.impl(feature)
                except Exception as exc:  # the calls say it (an error decision, say)
                    _logger().debug("kernelpolicy: %s not prepared: %s", feature, exc)

    def changed(self, old: Any, new: Any) -> None:
        """Say what a change of the node's halts or policies does in this process."""
        from kernelpolicy.following import changed_features

        if "sampler.top_k_top_p" in new.decisions:
            self.sampler_context = self.context_names("sampler.top_k_top_p")
        routed = {"sampler.top_k_top_p", "sampler.greedy", "rmsnorm"}
        said = [
            f"{name} {before} -> {after}"
            + ("" if name in routed else " (vLLM keeps what it was told at start: restart it)")
            for name, (before, after) in changed_features(old, new).items()
        ]
        _logger().warning(
            "kernelpolicy: the node's halts or policies changed, process %d now resolves to "
            "fingerprint %s (was %s): %s", os.getpid(), new.fingerprint, old.fingerprint,
            "; ".join(said) or "no choice changed",
        )  # fmt: skip

    def install(self) -> tuple[str, bool]:
        """Install each part the decisions ask for, each on its own: a part that fails leaves
        vLLM's own path for it and is named, the others stay. The IR provider always exists
        where vLLM has IR ops (a placeholder it never chooses where kernelpolicy's rmsnorm is
        not installed), since ``--ir-op-priority`` naming it makes vLLM assert it exists.

        Returns:
            (what was installed and what was not, in words; whether a part failed).
        """
        decisions = self.resolution.decisions
        rmsnorm = decisions.get("rmsnorm")
        steps: list[tuple[str, str, Callable[[], None]]] = []
        if rmsnorm is not None and rmsnorm.impl is not None:
            ir = f"IR ops {', '.join(IR_OPS)} -> provider {IR_PROVIDER}"
            steps.append(("IR", ir, lambda: _register_ir_ops(self)))
        if "sampler.top_k_top_p" in decisions:
            steps.append(("sampler.top_k_top_p", "sampler.top_k_top_p routed per call",
                          self.sampler))  # fmt: skip
        if "sampler.greedy" in decisions:
            steps.append(("sampler.greedy", "sampler.greedy routed", self.greedy))
        if {"sampler.top_k_top_p", "sampler.greedy"} & decisions.keys():
            steps.append(("runner_v2", "Model Runner V2's sampler routed", self.runner_v2))
        parts = [f"fingerprint {self.resolution.fingerprint}"]
        installed: set[str] = set()
        failed: list[str] = []
        for name, part, step in steps:
            try:
                step()
            except _NothingToRoute:  # this vLLM has no such part (no Model Runner V2)
                continue
            except Exception as exc:  # never take vLLM down: its own path for this part
                failed.append(f"{name}: {exc}")
                continue
            installed.add(name)
            parts.append(part)
        self.installed = installed
        if "IR" not in installed:
            _placeholder_provider()
        if installed:
            self.following.start()  # the node's halts and the policy files, while vLLM runs
            parts.append("following the node's halts and policy files")
        text = f"vLLM plugin active in process {os.getpid()}: " + "; ".join(parts)
        if failed:
            text += "; not installed, vLLM's own kept: " + "; ".join(failed)
        return text, bool(failed)

    def sampler(self) -> None:
        from kernelpolicy.vllm_sampling import route_v1_sampler

        self.sampler_context = self.context_names("sampler.top_k_top_p")
        route_v1_sampler(self, _logger)
        self.prefetch("sampler.top_k_top_p")

    def greedy(self) -> None:
        from kernelpolicy.vllm_sampling import route_v1_greedy

        route_v1_greedy(self, _logger)

    def runner_v2(self) -> None:
        from kernelpolicy.vllm_sampling import route_runner_v2

        if "sampler.top_k_top_p" in self.resolution.decisions:
            self.sampler_context = self.context_names("sampler.top_k_top_p")
        if not route_runner_v2(self, _logger):
            raise _NothingToRoute

    def prefetch(self, feature: str) -> None:
        """Start now, in the background, the imports and set-up of what ``feature``'s calls
        run first (``impl()`` does), so that the engine's first request does not pay them: on
        the H100 the first sample took 0.11-0.13 s so, 0.56-0.72 s without (Triton's import
        and its hash of its installation). A decision that cannot be served is said by the
        calls, as without this."""
        try:
            self.resolution.impl(feature)
        except Exception as exc:  # an error decision, a library that cannot load: calls say it
            _logger().debug("kernelpolicy: %s not prefetched: %s", feature, exc)

    def context_names(self, feature: str) -> frozenset[str]:
        """The call-context variables ``select()`` takes for ``feature``."""
        spec = self.resolution.policies.features[feature].spec
        names = set(spec.context)
        names |= {"batch"} if spec.by_batch else set()
        return frozenset(names | ({"dtype"} if spec.dtypes else set()))

    def sample(self, logits: Any, generators: Any, k: Any, p: Any, mode: str) -> Any:
        context = {
            "has_generators": bool(generators), "has_top_k": k is not None,
            "has_top_p": p is not None, "logprobs_mode": mode, "batch": int(logits.shape[0]),
            "dtype": dtype_name(logits.dtype),
        }  # fmt: skip
        wanted = self.sampler_context
        name = self.resolution.select(
            "sampler.top_k_top_p", **{k: v for k, v in context.items() if k in wanted}
        )
        function = self.resolution.implementation("sampler.top_k_top_p", name)
        self.counts.add(f"sampler.top_k_top_p/{name}")
        return function(logits, k, p, generators or None)


def _resolve(inputs: PluginInputs) -> Any:
    """Resolve as ``exec`` did: its snapshot where ``--platform`` gave one, else this machine
    (with the node's halts, as ``exec`` took them)."""
    from kernelpolicy import Platform, resolve

    snapshot = inputs.platform
    platform = Platform.from_dict(snapshot, source=INPUTS) if snapshot else None
    return resolve(platform, env=inputs.env, policies=inputs.policies or None)


def _check_fingerprint(resolution: Any, expected: str | None) -> None:
    if expected and expected != resolution.fingerprint:
        _logger().warning(
            "kernelpolicy: this process resolved to fingerprint %s, kernelpolicy exec to %s: "
            "the node changed between them, or the inputs differ",
            resolution.fingerprint, expected,
        )  # fmt: skip


def _watcher(inputs: PluginInputs) -> Callable[[], tuple[object, object]]:
    """What changes the decisions while vLLM runs: the node's halts file (where this machine
    is resolved) and the policy files. Where they are is read once; each look stats them."""
    from kernelpolicy.policy.files import policy_stamp
    from kernelpolicy.server.halts_file import file_stamp
    from kernelpolicy.server.node import node_halts_path
    from kernelpolicy.settings import settings_from

    settings = settings_from(os.environ if inputs.env is None else inputs.env)
    halts = None if inputs.platform else node_halts_path(settings)
    policies = inputs.policies or settings.policy_paths
    return lambda: (None if halts is None else file_stamp(halts), policy_stamp(policies))


def _follow_failed(message: str) -> None:
    _logger().warning(
        "kernelpolicy: the node's policies changed but cannot be used; this process keeps "
        "its decisions: %s", message,
    )  # fmt: skip


def _register_ir_ops(plugin: _Plugin) -> None:
    from vllm import ir

    plugin.resolution.impl("rmsnorm")  # loads now: a failure leaves vLLM's own

    def rms_norm(x: Any, weight: Any, epsilon: float, variance_size: int | None = None) -> Any:
        plugin.counts.add("ir.rms_norm")
        return plugin.resolution.impl("rmsnorm")(x, weight, epsilon)

    def fused_add_rms_norm(
        x: Any, x_residual: Any, weight: Any, epsilon: float, variance_size: int | None = None
    ) -> Any:
        plugin.counts.add("ir.fused_add_rms_norm")
        return plugin.resolution.impl("rmsnorm")(x, weight, epsilon, x_residual)

    _typed(rms_norm, fused_add_rms_norm)
    ir.ops.rms_norm.register_impl(IR_PROVIDER, supports_args=_norm_supports)(rms_norm)
    fused = ir.ops.fused_add_rms_norm
    fused.register_impl(IR_PROVIDER, supports_args=_fused_supports)(fused_add_rms_norm)


def _typed(rms_norm: Callable[..., Any], fused: Callable[..., Any]) -> None:
    """torch's custom-op schema is inferred from real annotations (this module's are strings)."""
    import torch

    optional = torch.Tensor | None
    rms_norm.__annotations__ = {
        "x": torch.Tensor, "weight": optional, "epsilon": float, "variance_size": int | None,
        "return": torch.Tensor,
    }  # fmt: skip
    fused.__annotations__ = {
        "x": torch.Tensor, "x_residual": torch.Tensor, "weight": optional, "epsilon": float,
        "variance_size": int | None, "return": tuple[torch.Tensor, torch.Tensor],
    }  # fmt: skip


def _norm_supports(x: Any, weight: Any, epsilon: float, variance_size: int | None = None) -> bool:
    """kernelpolicy's rmsnorm takes a weight and normalizes over the whole row."""
    return weight is not None and variance_size is None


def _fused_supports(
    x: Any, x_residual: Any, weight: Any, epsilon: float, variance_size: int | None = None
) -> bool:
    return weight is not None and variance_size is None


def _register_unsupported() -> None:
    """After a failure: the provider exists but is never chosen, so that a priority list that
    names it (``--ir-op-priority``) leaves vLLM on its next provider instead of failing."""
    from vllm import ir

    def rms_norm(x: Any, weight: Any, epsilon: float, variance_size: int | None = None) -> Any:
        raise RuntimeError("kernelpolicy's plugin failed to install")

    def fused_add_rms_norm(
        x: Any, x_residual: Any, weight: Any, epsilon: float, variance_size: int | None = None
    ) -> Any:
        raise RuntimeError("kernelpolicy's plugin failed to install")

    _typed(rms_norm, fused_add_rms_norm)
    for op, function in (
        (ir.ops.rms_norm, rms_norm),
        (ir.ops.fused_add_rms_norm, fused_add_rms_norm),
    ):
        if IR_PROVIDER not in op.impls:
            op.register_impl(IR_PROVIDER, supported=False)(function)
