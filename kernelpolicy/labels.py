"""Node labels: what a resolution says about a node, as Node Feature Discovery feature files.

NFD's ``local`` source turns each ``<prefix>/<name>=<value>`` line of a file in its
``features.d`` directory into a node label. Kubernetes accepts a label key as an optional DNS
subdomain prefix (at most 253 characters) and a name of at most 63 characters of
``[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?``; a value is empty or the same shape. Everything
written here is made to fit those rules (:func:`label_name`, :func:`label_value`) before it
reaches a file. The default prefix is a sub-namespace of ``feature.node.kubernetes.io``, which
every NFD release accepts without extra nfd-master flags.

Comment lines go through :func:`nfd_comment` (one line whatever the text, never an NFD
``# +`` directive), so the file holds nothing but comments and valid labels.

Files are replaced atomically (a dot file in the same directory, renamed over the old one), so
nfd-worker, which skips dot files, never reads a half-written one.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from kernelpolicy.encoding import described, escaped
from kernelpolicy.errors import KernelPolicyError
from kernelpolicy.limits import MAX_FEATURE_FILE_BYTES
from kernelpolicy.safeio import write_atomic
from kernelpolicy.versions import StackVersion, parse_version

if TYPE_CHECKING:
    from kernelpolicy.engine.resolution import Resolution
    from kernelpolicy.evidence.store import Evidence, EvidenceEntry
    from kernelpolicy.platform.model import Platform

PREFIX = "kernelpolicy.feature.node.kubernetes.io"
"""The label prefix: a sub-namespace of NFD's own, allowed by every nfd-master by default."""
FEATURE_FILE = "kernelpolicy"
"""The file name kernelpolicy owns in ``features.d``."""
MAX_PREFIX_CHARS = 253
MAX_NAME_CHARS = 63
MAX_VALUE_CHARS = 63

_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_OUTSIDE = re.compile(r"[^-A-Za-z0-9_.]+")
_EDGES = re.compile(r"\A[^A-Za-z0-9]+|[^A-Za-z0-9]+\Z")
_HASH_CHARS = 8
# A canonical PEP 440 version holds neither "-" nor "_": they stand for "+" and "!" in a label.
_TO_LABEL = str.maketrans("+!", "-_")
_FROM_LABEL = str.maketrans("-_", "+!")


class LabelError(KernelPolicyError):
    """A label prefix is not a DNS subdomain, or a feature file cannot be written."""


def is_valid_name(name: str) -> bool:
    """Whether ``name`` is a valid label name (the part after the ``/``)."""
    return len(name) <= MAX_NAME_CHARS and _NAME.fullmatch(name) is not None


def is_valid_value(value: str) -> bool:
    """Whether ``value`` is a valid label value (empty, or shaped like a name)."""
    return value == "" or is_valid_name(value)


def is_valid_prefix(prefix: str) -> bool:
    """Whether ``prefix`` is a DNS subdomain of at most 253 characters."""
    return (
        0 < len(prefix) <= MAX_PREFIX_CHARS
        and all(len(part) <= 63 and _DNS_LABEL.fullmatch(part) for part in prefix.split("."))
    )  # fmt: skip


def is_valid_key(key: str) -> bool:
    """Whether ``key`` (``prefix/name``) is a valid, prefixed label key."""
    prefix, sep, name = key.partition("/")
    return bool(sep) and is_valid_prefix(prefix) and is_valid_name(name)


def _fit(text: str, limit: int) -> str:
    """``text`` with runs of other characters as ``-``, alphanumeric at both ends, and at most
    ``limit`` characters; a cut text ends in a hash of the whole, so that cut texts stay apart."""
    cleaned = _EDGES.sub("", _OUTSIDE.sub("-", text))
    if len(cleaned) <= limit:
        return cleaned
    digest = hashlib.sha256(text.encode()).hexdigest()[:_HASH_CHARS]
    head = _EDGES.sub("", cleaned[: limit - _HASH_CHARS - 1])
    return f"{head}-{digest}" if head else digest


def label_name(text: str) -> str:
    """``text`` made into a valid label name (``x`` when nothing of it is usable)."""
    return _fit(text, MAX_NAME_CHARS) or "x"


def label_value(text: str) -> str:
    """``text`` made into a valid label value (``2.11.0+cu130`` becomes ``2.11.0-cu130``)."""
    return _fit(text, MAX_VALUE_CHARS)


def version_value(raw: str) -> str:
    """A library's version as a label value that :func:`version_of_value` reads back as the
    same version (``0.1.16.post3.dev0+g1a2b3c4`` is ``0.1.16.post3.dev0-g1a2b3c4``).

    A readable version is written in its canonical PEP 440 form, the local label of a dotted
    one included (:func:`~kernelpolicy.versions.parse_version`); of its characters a label
    refuses only ``+`` and ``!``, written ``-`` and ``_``. A version longer than
    ``MAX_VALUE_CHARS`` keeps its public part and a hash of its local label (which ranges
    ignore). Anything else (an unreadable string, or a public part too long) is made to fit as
    any value.
    """
    parsed = parse_version(raw)
    if isinstance(parsed, StackVersion):
        text = str(parsed.value).translate(_TO_LABEL)
        if len(text) > MAX_VALUE_CHARS and parsed.value.local is not None:
            # Ranges ignore a local label (PEP 440): a hash of it keeps what they compare.
            local = hashlib.sha256(parsed.value.local.encode()).hexdigest()[:_HASH_CHARS]
            text = f"{parsed.value.public.translate(_TO_LABEL)}-{local}"
        if len(text) <= MAX_VALUE_CHARS:
            return text
    return label_value(raw)


def version_of_value(value: str) -> str:
    """The version a :func:`version_value` label stands for; any other value as it is."""
    text = value.translate(_FROM_LABEL)
    parsed = parse_version(text)
    if isinstance(parsed, StackVersion) and parsed.scheme == "pep440" and str(parsed.value) == text:
        return text
    return value


def node_labels(
    resolution: Resolution, evidence: Evidence | None = None, *, prefix: str = PREFIX
) -> dict[str, str]:
    """The labels of a node: its GPU, driver and library versions, and each decision.

    Args:
        resolution: The node's resolution.
        evidence: The verify results stored on this node, for the ``verified.*`` labels.
        prefix: The label prefix (a DNS subdomain).

    Raises:
        LabelError: ``prefix`` is not a DNS subdomain.

    Returns:
        Label key -> value, every key and value valid for Kubernetes, in a stable order.
    """
    if not is_valid_prefix(prefix):
        raise LabelError(
            f"label prefix {prefix[:80]!r} is not a DNS subdomain of at most {MAX_PREFIX_CHARS} "
            "characters (lower-case letters, digits, '-' and '.')"
        )
    platform = resolution.platform
    facts = _platform_facts(platform)
    facts.update(_switch_facts(resolution))
    facts.update(_decision_facts(resolution))
    facts["node.identity"] = platform.identity  # what rollout cohorts are hashed from
    if evidence is not None:
        for (feature, impl), entry in sorted(evidence.entries.items()):
            facts[f"verified.{feature}.{impl}"] = "true" if entry.passed else "false"
            facts[f"dtypes.{feature}.{impl}"] = dtype_results_value(entry)
    facts["policy.digest"] = resolution.policies.digest  # the same on nodes of the same files
    facts["policy.fingerprint"] = resolution.fingerprint
    return {
        f"{prefix}/{label_name(name)}": label_value(value)
        for name, value in facts.items()
        if value is not None
    }


DtypeResults = tuple[tuple[str, ...], tuple[str, ...], bool, tuple[str, ...], bool]
"""(dtypes passed, dtypes failed, a check naming none failed, dtypes differing by a
convention, some check differs by a convention): what per-dtype routing reads of a result."""
_STATES = {"": (False, False), "f": (True, False), "d": (False, True), "fd": (True, True)}


def dtype_results_value(entry: EvidenceEntry) -> str | None:
    """The ``dtypes.<feature>.<impl>`` label of a verify result: per dtype it named, in
    ``DTYPE_NAMES`` order, ``bfloat16`` (passed), ``bfloat16-f`` (failed), with ``d`` where a
    check of it only differs by a convention (``bfloat16-d``, ``bfloat16-fd``); then ``g`` where
    a check naming no dtype failed, ``c`` where one differs (and no dtype says ``d``). At most
    37 characters. ``None`` where the result says nothing of the kind (the label is left out)."""
    from kernelpolicy.dtypes import DTYPE_NAMES

    tokens = []
    for name in DTYPE_NAMES:
        if name in entry.dtypes_passed or name in entry.dtypes_failed:
            state = ("f" if name in entry.dtypes_failed else "") + (
                "d" if name in entry.dtypes_differ else ""
            )
            tokens.append(f"{name}-{state}" if state else name)
    if entry.general_failed:
        tokens.append("g")
    if entry.conventions and not entry.dtypes_differ:
        tokens.append("c")
    return ".".join(tokens) or None


def dtype_results_of_value(value: str) -> DtypeResults | None:
    """What a :func:`dtype_results_value` label says, or ``None`` for any other value."""
    from kernelpolicy.dtypes import DTYPE_NAMES

    passed: list[str] = []
    failed: list[str] = []
    differ: list[str] = []
    flags: set[str] = set()
    for token in value.split("."):
        name, _, state = token.partition("-")
        if token in ("g", "c") and token not in flags:
            flags.add(token)
        elif name in DTYPE_NAMES and state in _STATES and name not in passed + failed:
            is_failed, differs = _STATES[state]
            (failed if is_failed else passed).append(name)
            if differs:
                differ.append(name)
        else:
            return None
    ordered = [d for d in DTYPE_NAMES if d in passed + failed]  # as verify stores them
    return (
        tuple(d for d in ordered if d in passed), tuple(d for d in ordered if d in failed),
        "g" in flags, tuple(d for d in ordered if d in differ), "c" in flags or bool(differ),
    )  # fmt: skip


def _platform_facts(platform: Platform) -> dict[str, str | None]:
    """``gpu.*``, ``driver.*``, ``torch.version`` and ``lib.<dist>``: the node's GPU and the
    versions of its driver and libraries."""
    facts: dict[str, str | None] = {}
    device = platform.primary
    facts["gpu.vendor"] = platform.vendor
    facts["gpu.count"] = str(len(platform.devices))
    if device is not None:
        facts["gpu.product"] = device.name
        facts["gpu.arch"] = device.arch  # the gfx target on AMD (gfx942), sm_90 on NVIDIA
        facts["gpu.capability"] = device.capability
        major, _, minor = device.capability.partition(".")
        # Separate integers, so that a nodeAffinity can compare them with Gt/Lt.
        facts["gpu.capability.major"] = major
        facts["gpu.capability.minor"] = minor
        if device.compute_units is not None:  # min_compute_units and CEL rules read it
            facts["gpu.compute_units"] = str(device.compute_units)
    facts["driver.version"] = platform.driver.version
    facts["driver.cuda"] = platform.driver.cuda
    facts["driver.rocm"] = platform.driver.rocm
    torch = platform.torch.version
    facts["torch.version"] = None if torch is None else version_value(torch)
    for dist, version in sorted(platform.libraries.items()):
        facts[f"lib.{dist}"] = version_value(version)
    return facts


def _decision_facts(resolution: Resolution) -> dict[str, str | None]:
    """``impl.<feature>`` for each decision, and ``rollout.*`` and ``halted.*`` for its
    candidates with a rollout or halted on this node; ``disable.<feature>.<impl>`` (in, out,
    off or no-identity; ``in``: the switch-off applies here) for those a staged disable names."""
    from kernelpolicy.engine.cohort import disable_rollouts_of

    facts: dict[str, str | None] = {}
    for feature, impl, result in disable_rollouts_of(resolution.decisions):
        facts[f"disable.{feature}.{impl}"] = result.cohort.value
    for feature, decision in resolution.decisions.items():
        facts[f"impl.{feature}"] = decision.impl or (
            "error" if decision.error is not None else "none"
        )
        for candidate in decision.candidates:
            if candidate.rollout is not None:  # in, out, off or no-identity
                facts[f"rollout.{feature}.{candidate.impl}"] = candidate.rollout.cohort.value
            if any(f.kind.value == "halted" for f in candidate.failures):  # halt_on, on this node
                facts[f"halted.{feature}.{candidate.impl}"] = "true"
    return facts


def _switch_facts(resolution: Resolution) -> dict[str, str | None]:
    """``env.<VARIABLE>`` for the variables the policies read (a bounded set) and each force:
    with the platform's facts, what ``kernelpolicy diff`` needs to decide for the node again."""
    from kernelpolicy.engine.switches import force_variable

    facts: dict[str, str | None] = {
        f"env.{variable}": value for variable, value in sorted(resolution.env.items())
    }
    # A force set in settings (KERNELPOLICY_OVERRIDES) is no variable, yet decides as one:
    # written as the variable that forces the same (where both are set, the variable won).
    for feature, impl in sorted(resolution.overrides.items()):
        if feature in resolution.policies.features:
            facts[f"env.{force_variable(feature)}"] = impl
    return facts


def render_nfd(labels: Mapping[str, str], *, comment: str = "") -> str:
    """A ``features.d`` file: optional comment lines, then one ``key=value`` line per label.

    Raises:
        LabelError: A key or value is not valid for Kubernetes, or the file would exceed
            ``MAX_FEATURE_FILE_BYTES`` (nfd-worker ignores bigger files).
    """
    lines = [nfd_comment(line) for line in comment.splitlines()]
    for key, value in labels.items():
        if not (is_valid_key(key) and is_valid_value(value)):
            raise LabelError(
                f"not a valid Kubernetes label: {described(key, 300)}={described(value, 100)}"
            )
        lines.append(f"{key}={value}")
    text = "\n".join(lines) + "\n"
    if len(text.encode()) > MAX_FEATURE_FILE_BYTES:
        raise LabelError(
            f"the feature file would be {len(text.encode())} bytes, over "
            f"MAX_FEATURE_FILE_BYTES ({MAX_FEATURE_FILE_BYTES}); nfd-worker ignores such files"
        )
    return text


def nfd_comment(text: str) -> str:
    """One comment line of a feature file: every character that could end the line escaped,
    and a leading ``+`` too (nfd-worker reads ``# +expiry-time=...`` as a directive)."""
    text = escaped(text)
    return f"# \\x2b{text[1:]}" if text.startswith("+") else f"# {text}"


FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
"""Where nfd-worker's ``local`` source reads feature files by default."""
EXPECTED_DIRECTORY = (
    f"expected an existing directory this user can write, NFD's features.d ({FEATURES_DIR})"
)


def write_feature_file(directory: Path, text: str, name: str = FEATURE_FILE) -> Path:
    """Replace ``directory/name`` with ``text`` atomically (readable by all, mode 0644).

    Raises:
        LabelError: The directory is missing, not a directory, or takes no file from this
            user (a kernel file system such as ``/proc``, a read-only mount), saying which and
            what was expected; or the write failed (a full disk).

    Returns:
        The path written.
    """
    target = directory / name
    try:
        write_atomic(target, text.encode("utf-8"), 0o644)
    except OSError as exc:
        raise LabelError(
            f"cannot write the feature file {target}: {_why_not_written(directory, target, exc)}"
        ) from None
    return target


def _why_not_written(directory: Path, target: Path, exc: OSError) -> str:
    """What kept ``target`` from being written, and what was expected instead: the bare
    ``strerror`` misleads (``/proc`` answers "No such file or directory" for a directory that
    exists), so the directory is looked at once the write failed."""
    import errno
    import os

    said = exc.strerror or str(exc)
    where = _not_a_directory(directory)
    if where is None and exc.errno == errno.EISDIR and target.is_dir():
        return f"{target} is a directory; expected a file of kernelpolicy's there, or none"
    if where is None and exc.errno == errno.EROFS:
        where = f"{directory} is on a read-only file system ({said})"
    elif where is None and exc.errno in (errno.EACCES, errno.EPERM) and os.geteuid() != 0:
        where = f"uid {os.geteuid()} cannot create a file in {directory} ({said})"
    elif where is None and exc.errno in (errno.EACCES, errno.EPERM, errno.ENOENT):
        # The directory is there, yet refuses a file (/proc: ENOENT; /sys: EACCES, to root too).
        where = f"{directory} takes no new files ({said}: a kernel file system, /proc or /sys?)"
    return said if where is None else f"{where}; {EXPECTED_DIRECTORY}"


def _not_a_directory(directory: Path) -> str | None:
    """Why ``directory`` is no directory to write in (missing, a file), or None."""
    import stat

    try:
        mode = directory.stat().st_mode
    except FileNotFoundError:
        return f"{directory} does not exist"
    except OSError as problem:
        return f"{directory}: {problem.strerror or problem}"
    return None if stat.S_ISDIR(mode) else f"{directory} is not a directory"


def nfd_text(labels: dict[str, str], fingerprint: str, policy_digest: str) -> str:
    """The features.d file for ``labels``, with a comment saying who writes it and from what:
    the resolution's ``fingerprint`` (of the node and its policies) and the ``policy_digest``
    of the policy files alone (``PolicySet.digest``, as the label ``policy.digest``)."""
    from kernelpolicy.versions import KERNELPOLICY_VERSION

    return render_nfd(
        labels,
        comment=f"Written by kernelpolicy {KERNELPOLICY_VERSION} (fingerprint {fingerprint}, "
        f"policy digest {policy_digest}); rewritten on every new revision, do not edit.",
    )
