"""Checks of one candidate against a platform. Pure: no I/O, no environment."""

from __future__ import annotations

from dataclasses import dataclass, field

from kernelpolicy.engine.model import Check, CheckKind, Note
from kernelpolicy.evidence.store import Evidence
from kernelpolicy.platform.model import Platform
from kernelpolicy.policy.compiled import (
    CompiledCandidate,
    CompiledDisable,
    CompiledIssue,
    LibraryCheck,
)
from kernelpolicy.versions import (
    LazySpecifierSet,
    UnreadableVersion,
    version_admitted,
)

_VENDOR_NAMES = {"nvidia": "an NVIDIA GPU", "amd": "an AMD GPU", "none": "no GPU"}
_UNIT_NAMES = {"nvidia": "SMs", "amd": "CUs"}
_VERSION_LABELS = {
    "driver": "driver",
    "cuda": "CUDA driver version",
    "rocm": "ROCm",
    "torch": "torch",
}


@dataclass
class CheckResult:
    failures: list[Check] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    guards: list[str] = field(default_factory=list)


def check_candidate(
    candidate: CompiledCandidate,
    platform: Platform,
    disables: tuple[CompiledDisable, ...],
    evidence: Evidence | None = None,
    *,
    by_dtype: bool = False,
    same_draws: bool = False,
) -> CheckResult:
    """Every check ``candidate`` fails on ``platform``; all are reported, not just the first.

    ``by_dtype``: the feature routes calls by dtype, so evidence that failed only for some
    dtypes verifies the candidate for the others (the routing serves it only those).
    """
    result = CheckResult()
    if candidate.spec.verified:
        _check_evidence(candidate, evidence, result, by_dtype, same_draws)
    spec = candidate.spec
    _check_device(candidate, platform, result.failures)
    for key, specifier in candidate.versions.items():
        found = _platform_version(platform, key)
        failure = _version_failure(
            _VERSION_LABELS[key], found, specifier, "full", _kind(key), text=getattr(spec, key)
        )
        if failure:
            result.failures.append(failure)
    reported = _check_libraries(candidate, platform, result)
    for issue in candidate.issues:
        _apply_issue(issue, platform, reported, result)
    _check_workarounds(candidate, platform, result)
    for disable in disables:
        if disable.spec.feature == candidate.feature and disable.spec.impl == spec.impl:
            result.failures.append(
                Check(
                    CheckKind.DISABLED,
                    f"disabled by policy ({disable.source}): {disable.spec.reason}",
                    f"remove the [[disable]] entry in {disable.source.file} to re-enable it",
                    disable.spec.reference,
                )
            )
    return result


def _check_evidence(
    candidate: CompiledCandidate,
    evidence: Evidence | None,
    result: CheckResult,
    by_dtype: bool,
    same_draws: bool = False,
) -> None:
    """``verified = true``: only once ``kernelpolicy verify`` passed here, with these versions
    (for a feature routed by dtype: passed for some dtypes, every failure naming a dtype)."""
    feature, impl = candidate.feature, candidate.impl
    entry = evidence.get(feature, impl, same_draws=same_draws) if evidence is not None else None
    command = f"kernelpolicy verify --feature {feature} --impl {impl}"
    if entry is None:
        why = evidence.problem if evidence is not None and evidence.problem else None
        message = "not verified on this platform with these library versions"
        result.failures.append(
            Check(CheckKind.EVIDENCE, f"{message}{f' ({why})' if why else ''}", f"run {command}")
        )
    elif not entry.passed and not (by_dtype and entry.dtypes_passed and not entry.general_failed):
        result.failures.append(
            Check(
                CheckKind.EVIDENCE,
                f"failed kernelpolicy verify on {entry.created}: {entry.summary}",
                f"see {entry.source}; re-run {command} after a fix",
            )
        )
    elif not entry.passed:
        result.notes.append(
            Note(
                f"verified by kernelpolicy verify on {entry.created} for "
                f"{', '.join(entry.dtypes_passed)} only (failed {', '.join(entry.dtypes_failed)})",
                entry.source,
            )
        )
    else:
        differs = (
            f"; differs from kernelpolicy's convention ({'; '.join(entry.conventions)}), which "
            "this feature does not require"
            if entry.conventions
            else ""
        )
        result.notes.append(
            Note(f"verified by kernelpolicy verify on {entry.created}{differs}", entry.source)
        )


def _check_libraries(
    candidate: CompiledCandidate, platform: Platform, result: CheckResult
) -> set[str]:
    """Library requirements; a version failure that a known issue explains gets its reason.

    Returns:
        The libraries already reported, so the overlapping known issue is not repeated.
    """
    issues_by_library = {
        issue.library.name: issue
        for issue in candidate.issues
        if issue.library and issue.spec.action == "disable"
    }
    reported: set[str] = set()
    for library in candidate.libraries:
        failure = _library_failure(library, platform)
        issue = issues_by_library.get(library.name)
        if failure and issue and failure.kind is CheckKind.LIBRARY_VERSION:
            failure = Check(
                failure.kind,
                f"{failure.message}: {issue.spec.reason}",
                issue.spec.fix or failure.hint,
                issue.spec.reference,
            )
        if failure:
            result.failures.append(failure)
            reported.add(library.name)
    return reported


def _check_workarounds(
    candidate: CompiledCandidate, platform: Platform, result: CheckResult
) -> None:
    for workaround in candidate.workarounds:
        lifted = bool(workaround.lift_when) and all(
            check.satisfied(platform.libraries) for check in workaround.lift_when
        )
        reason = workaround.spec.reason
        if lifted:
            result.notes.append(
                Note(
                    f"workaround lifted (its condition is met): {reason}", workaround.spec.reference
                )
            )
        else:
            result.failures.append(
                Check(
                    CheckKind.WORKAROUND,
                    f"disabled by a workaround: {reason}; may be lifted: {workaround.spec.until}",
                    None,
                    workaround.spec.reference,
                )
            )


def _check_device(candidate: CompiledCandidate, platform: Platform, failures: list[Check]) -> None:
    spec = candidate.spec
    if spec.vendor and spec.vendor != platform.vendor:
        failures.append(
            Check(
                CheckKind.VENDOR,
                f"needs {_VENDOR_NAMES[spec.vendor]}, found {_VENDOR_NAMES[platform.vendor]}",
            )
        )
        return
    device = platform.primary
    needs_device = spec.vendor or spec.arch or spec.capability or spec.min_compute_units
    if device is None:
        if needs_device:
            why = "; ".join(platform.probe_errors) or "no device visible"
            failures.append(Check(CheckKind.NO_DEVICE, f"needs a GPU, but none was found ({why})"))
        return
    if spec.arch and device.arch not in spec.arch:
        failures.append(
            Check(CheckKind.ARCH, f"needs arch {' or '.join(spec.arch)}, found {device.arch}")
        )
    if device.arch in spec.exclude_arch:
        failures.append(Check(CheckKind.ARCH, f"never used on {device.arch}"))
    if candidate.capability is not None:
        failure = _version_failure(
            "compute capability", device.capability, candidate.capability, "full",
            CheckKind.CAPABILITY, text=spec.capability,
        )  # fmt: skip
        if failure:
            failures.append(failure)
    if spec.min_compute_units is not None:
        units = _UNIT_NAMES.get(platform.vendor, "compute units")
        if device.compute_units is None:
            failures.append(
                Check(
                    CheckKind.COMPUTE_UNITS,
                    f"needs at least {spec.min_compute_units} {units}, count unknown",
                )
            )
        elif device.compute_units < spec.min_compute_units:
            failures.append(
                Check(
                    CheckKind.COMPUTE_UNITS,
                    f"needs at least {spec.min_compute_units} {units}, "
                    f"found {device.compute_units}",
                )
            )


def _kind(key: str) -> CheckKind:
    return {
        "driver": CheckKind.DRIVER,
        "cuda": CheckKind.CUDA,
        "rocm": CheckKind.ROCM,
        "torch": CheckKind.TORCH,
    }[key]


def _platform_version(platform: Platform, key: str) -> str | None:
    """The platform's version that a policy's ``driver``, ``cuda``, ``rocm`` or ``torch`` key
    is checked against (``driver`` is the driver's own version, ``DriverInfo.version``)."""
    if key == "torch":
        return platform.torch.version
    value: str | None = (
        platform.driver.version if key == "driver" else getattr(platform.driver, key)
    )
    return value


def _version_failure(
    label: str,
    found: str | None,
    specifier: LazySpecifierSet,
    compare: str,
    kind: CheckKind,
    *,
    text: str | None = None,
) -> Check | None:
    wanted = text or str(specifier)  # as the policy wrote it; SpecifierSet reorders its parts
    if found is None:
        return Check(kind, f"needs {label} {wanted}, but it is unknown on this platform")
    admitted = version_admitted(found, specifier, base=compare == "base")
    if isinstance(admitted, UnreadableVersion):
        return Check(
            CheckKind.UNREADABLE_VERSION,
            f"needs {label} {wanted}, but found {admitted}",
        )
    if admitted:
        return None
    return Check(kind, f"needs {label} {wanted}, found {found}")


def _library_failure(check: LibraryCheck, platform: Platform) -> Check | None:
    found = platform.libraries.get(check.name)
    if found is None:
        wanted = check.name if check.specifier is None else f"{check.name}{check.text}"
        return Check(
            CheckKind.LIBRARY_MISSING,
            f"needs {check.name} (not installed)",
            f"pip install '{wanted}'",
        )
    if check.specifier is None:
        return None
    failure = _version_failure(
        check.name, found, check.specifier, check.compare, CheckKind.LIBRARY_VERSION,
        text=check.text,
    )  # fmt: skip
    if failure is not None and failure.kind is CheckKind.LIBRARY_VERSION:
        return Check(failure.kind, failure.message, f"install '{check.name}{check.text}'")
    return failure


def _apply_issue(
    issue: CompiledIssue, platform: Platform, reported: set[str], result: CheckResult
) -> None:
    spec = issue.spec
    if issue.library is not None and not issue.library.satisfied(platform.libraries):
        return
    where = (
        f"{issue.library.name} {platform.libraries[issue.library.name]} " if issue.library else ""
    )
    if spec.action == "disable":
        if issue.library and issue.library.name in reported:
            return  # already explained by the library requirement it overlaps
        result.failures.append(
            Check(
                CheckKind.KNOWN_ISSUE,
                f"{where}has a known issue: {spec.reason}".strip(),
                spec.fix,
                spec.reference,
            )
        )
    elif spec.action == "guard":
        result.guards.append(spec.guard or "")
        result.notes.append(
            Note(f"known issue, output guarded by '{spec.guard}': {spec.reason}", spec.reference)
        )
    else:
        result.notes.append(Note(f"known issue: {spec.reason}", spec.reference))
