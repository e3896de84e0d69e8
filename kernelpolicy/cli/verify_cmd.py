"""``kernelpolicy verify``: run the verify suite here and store the results as evidence."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelpolicy.cli.common import HelpFormatter
from kernelpolicy.errors import KernelPolicyError

if TYPE_CHECKING:
    from kernelpolicy.kernel_cache import BuiltRecord


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "verify",
        help="run the verify suite on this machine and store the evidence",
        description=(
            "Check every implementation that can run here: robustness on NaN/inf logits and "
            "the sampling distribution (chi-square) for samplers, float64 accuracy for RMSNorm "
            "and all-reduce + RMSNorm (one process and a 2-process gloo group), exact agreement "
            "for top-k per row. Results are stored as evidence for this platform and these "
            "library versions; policies with 'verified = true' use them. Exits 1 on a failure. "
            "On a terminal, stderr shows the checks done of the total and an ETA; elsewhere "
            "one 'verifying FEATURE/IMPL ...' line per implementation."
        ),
        epilog=(
            "examples:\n"
            "  kernelpolicy verify\n"
            "  kernelpolicy verify --quick                  a smoke run, never stored\n"
            "  kernelpolicy verify --feature sampler.top_k_top_p --json\n"
            "  kernelpolicy verify --feature sampler.greedy --entry mypkg.kernels:greedy \\\n"
            "      --guard clamp_token_ids"
        ),
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--feature", action="append", help="only this feature (repeatable)")
    parser.add_argument("--impl", action="append", help="only this implementation (repeatable)")
    parser.add_argument(
        "--entry", metavar="MODULE:FUNCTION",
        help="check your own callable for --feature instead of the built-in ones (not stored)",
    )  # fmt: skip
    parser.add_argument("--guard", help="wrap --entry in an output guard (clamp_token_ids)")
    parser.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--no-store", action="store_true", help="do not write evidence")
    parser.add_argument(
        "--quick", action="store_true",
        help="a fast smoke run: fewer samples, patterns and (k, p) cases; labelled 'quick' in "
        "the table and the JSON, and never stored as evidence (implies --no-store)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--out", type=Path, metavar="FILE",
        help="also write the JSON results to FILE, rewritten as each implementation finishes "
        '("complete": false until the run ends), so a run cut short keeps what finished',
    )  # fmt: skip
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    _require_verify_extra()
    try:
        from kernelpolicy.verify import suite
    except ImportError as exc:  # installed but broken (a wrong CUDA build, a missing .so)
        raise KernelPolicyError(
            f"kernelpolicy verify cannot import {exc.name or 'its dependencies'}: {exc}"
        ) from None

    from kernelpolicy.verify.profile import FULL, QUICK

    _check_features(suite.CHECKS, args.feature or [])
    device = _device(args.device)
    out = _output_file(args.out)
    profile = QUICK if args.quick else FULL
    storing = profile.evidence and not args.no_store and not args.entry
    from kernelpolicy.cli import verify_child
    from kernelpolicy.logs import warnings_dropped

    said = verify_child.parent_said(os.environ)  # the parent that ran this said them
    with warnings_dropped(said):
        settings = _settings()
    if storing:  # refuse an untrusted store now, not after the suite has run
        from kernelpolicy.evidence.store import prepare_store

        prepare_store(settings.cache_dir, allow_untrusted=settings.allow_untrusted_files)
    builds = _builds_kernels(device)
    extra, record = kernel_cache_found(settings.cache_dir, create=builds, say=not said)
    if builds and "FLASHINFER_WORKSPACE_BASE" in extra:  # only its environment points it
        return verify_child.run(
            verify_child.command(args), verify_child.environment(os.environ, extra)
        )
    from kernelpolicy.kernels.cache_lookup import using_kernel_cache

    with using_kernel_cache(record, triton=builds and "TRITON_CACHE_DIR" in extra):
        reports = _reports(args, suite, device, out, profile)
    results = [r.to_dict() for r in reports]
    stored = _store(results, settings) if storing else None
    document = _document(profile.name, stored, True, results)
    if out is not None:
        _write_json(out, document)
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        _print_table(reports, stored, profile.name)
    return 1 if any(r.status == "failed" for r in reports) else 0


def _store(results: list[dict[str, Any]], settings: Any) -> str:
    """Store ``results`` as this platform's evidence; returns the file written."""
    from kernelpolicy.evidence.store import store_evidence
    from kernelpolicy.platform.probing import probe

    created = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return str(
        store_evidence(
            probe(), results, created, settings.cache_dir,
            allow_untrusted=settings.allow_untrusted_files,
        )
    )  # fmt: skip


def kernel_cache_found(
    cache_dir: Path | None, *, create: bool, say: bool = True
) -> tuple[dict[str, str], BuiltRecord | None]:
    """The node's kernel cache for the suite, as exec gives it to the engines it starts: verify
    loads what warm built, and what it builds goes there, recorded for the workers. With
    ``create`` (a GPU run: it compiles) a missing cache is created private, as warm does; one
    that is not trusted is said in one line (unless not ``say``: a child whose parent said it)
    and not used.

    Returns:
        The cache's variables that this process's environment does not set
        (``kernel_cache.cache_environment``; none where it is not used), and the record the
        suite uses: the cache's where ``TRITON_CACHE_DIR`` is among them, else that of the
        cache a worker with this environment would use (a TRITON_CACHE_DIR you set is kept).
        ``run`` points Triton at the cache through Triton's own setting and, where FlashInfer's
        variable is among them on a GPU run, runs again in a child whose environment carries
        them (:mod:`kernelpolicy.cli.verify_child`): FlashInfer reads the environment only.
    """
    from kernelpolicy.errors import UntrustedFileError
    from kernelpolicy.kernel_cache import (
        BuiltRecord,
        cache_environment,
        kernel_cache_dir,
        prepare_kernel_cache,
        record_in_use,
    )
    from kernelpolicy.settings import default_cache_dir

    cache = cache_dir or default_cache_dir()
    try:
        if create:
            prepare_kernel_cache(cache)
        extra, problem = cache_environment(cache, os.environ)
    except UntrustedFileError as exc:
        extra, problem = {}, str(exc)
    if say and problem is not None and kernel_cache_dir(cache).exists():  # missing: nothing
        print(f"kernelpolicy: warning: kernel cache not used: {problem}", file=sys.stderr)
    if "TRITON_CACHE_DIR" in extra:  # the cache, trusted (just checked), and yours unset
        return extra, BuiltRecord(kernel_cache_dir(cache))
    record, said = record_in_use(os.environ)  # yours, or none
    if say and said is not None and said != problem:
        print(f"kernelpolicy: warning: kernel cache not used: {said}", file=sys.stderr)
    return extra, record


def _document(
    profile: str, stored: str | None, complete: bool, results: list[dict[str, Any]]
) -> dict[str, Any]:
    """What --json prints and --out holds; ``profile`` says "quick" for a smoke run."""
    return {"profile": profile, "evidence": stored, "complete": complete, "results": results}


def _reports(
    args: argparse.Namespace, suite: Any, device: str | None, out: Path | None, profile: Any
) -> list[Any]:
    """Run what the arguments select; with ``out``, rewrite it as each implementation ends."""
    if args.entry:
        if not args.feature or len(args.feature) != 1:
            raise KernelPolicyError("--entry needs exactly one --feature to check it against")
        suite.targets(args.feature)  # validates the feature name
        _check_guard(args.guard)
        _check_entry(args.entry)
        impl = (args.impl or ["custom"])[0]
        return [
            suite.run_one(
                args.feature[0], impl, args.entry, device=device, guard=args.guard, profile=profile
            )
        ]
    if args.guard:
        raise KernelPolicyError("--guard applies to --entry only")
    _check_selection(suite, args.feature, args.impl)
    from kernelpolicy.cli.progress import for_stream

    reports = []
    progress = for_stream(sys.stderr)
    runs = suite.iter_run(
        args.feature, args.impl, device=device, progress=progress, profile=profile
    )
    try:
        for report in runs:
            reports.append(report)
            if out is not None:
                results = [r.to_dict() for r in reports]
                _write_json(out, _document(profile.name, None, False, results))
    finally:  # an interrupted run ends its progress line too, so the shell's prompt is clean
        progress.close()
    return reports


def _output_file(path: Path | None) -> Path | None:
    """``--out``, checked before the suite runs: its folder must exist and it must not be one."""
    if path is None:
        return None
    if path.is_dir():
        raise KernelPolicyError(f"--out {path}: is a directory; expected a file to write")
    if not path.parent.is_dir():
        raise KernelPolicyError(f"--out {path}: folder {path.parent} does not exist")
    try:  # a folder that takes no new file is refused now, not after minutes of checks
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=path.parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise KernelPolicyError(
            f"--out {path}: cannot create a file in {path.parent} ({exc.strerror or exc})"
        ) from None
    return path


def _write_json(path: Path, document: dict[str, Any]) -> None:
    """Write ``document`` to ``path`` whole, with the user's umask: :func:`safeio.write_atomic`
    (a reader sees the old file or the new one; a link planted at ``path`` or at the temporary
    name beside it is replaced, never followed)."""
    from kernelpolicy.safeio import write_atomic

    data = (json.dumps(document, indent=2) + "\n").encode("utf-8")
    try:
        write_atomic(path, data, 0o666 & ~_umask())
    except OSError as exc:
        raise KernelPolicyError(f"--out {path}: cannot write it ({exc.strerror or exc})") from None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_VERIFY_NEEDS = ("torch", "scipy", "numpy")


def _require_verify_extra() -> None:
    """Name every missing package of the ``verify`` extra at once, not the first one only.

    ``find_spec`` looks without importing (torch takes seconds), so a missing package is
    reported before anything heavy loads.
    """
    import importlib.util

    missing = [name for name in _VERIFY_NEEDS if importlib.util.find_spec(name) is None]
    if missing:
        raise KernelPolicyError(
            f"kernelpolicy verify needs {', '.join(_VERIFY_NEEDS)}; missing here: "
            f"{', '.join(missing)}. Install them with: pip install 'kernelpolicy[verify]'"
        )


def _builds_kernels(device: str | None) -> bool:
    """Whether this run compiles GPU kernels (``--device`` cuda, or none given and a GPU here)."""
    import torch

    return device != "cpu" and torch.cuda.is_available()


def _device(device: str | None) -> str | None:
    """``--device``: cpu, or cuda when torch has a CUDA (or ROCm) device here."""
    import torch

    if device is None or device == "cpu":
        return device
    if device != "cuda":
        raise KernelPolicyError(f"--device {device!r}: expected cpu or cuda")
    if not torch.cuda.is_available():
        build = (
            "a CPU-only build" if not (torch.version.cuda or torch.version.hip) else "a GPU build"
        )
        raise KernelPolicyError(
            f"--device cuda: torch {torch.__version__} ({build}) sees no CUDA or ROCm device "
            "here; accepted on this machine: --device cpu"
        )
    return device


def _check_guard(guard: str | None) -> None:
    from kernelpolicy.kernels.guards import GUARDS

    if guard is not None and guard not in GUARDS:
        raise KernelPolicyError(f"--guard {guard!r}: unknown guard; known: {', '.join(GUARDS)}")


def _check_entry(entry: str) -> None:
    """``--entry MODULE:FUNCTION`` must import here: a skipped check would pass in silence."""
    from kernelpolicy.policy.entries import load_entry, parse_entry

    try:
        module, attr = parse_entry(entry)
    except ValueError as exc:
        raise KernelPolicyError(str(exc)) from None  # as a policy's entry is refused
    try:
        function = load_entry(entry)
    except ImportError as exc:
        raise KernelPolicyError(
            f"--entry {entry}: cannot import module {module!r} ({exc}); is it installed, or on "
            "PYTHONPATH?"
        ) from None
    except AttributeError:
        raise KernelPolicyError(f"--entry {entry}: module {module!r} has no {attr!r}") from None
    except Exception as exc:  # importing runs the module's code; any failure is the answer
        raise KernelPolicyError(
            f"--entry {entry}: importing {module!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    if not callable(function):
        raise KernelPolicyError(f"--entry {entry}: {attr!r} is not callable")


def _check_features(checked: Iterable[str], features: list[str]) -> None:
    """Each --feature must be one the suite checks; a typo names the close ones.

    Raises:
        KernelPolicyError: A feature the suite has no checks for.
    """
    from kernelpolicy.suggest import did_you_mean

    known = list(checked)
    for feature in features:
        if feature not in known:
            raise KernelPolicyError(
                f"verify has no checks for feature {feature!r}{did_you_mean(feature, known)}; "
                f"checked features: {', '.join(known)}"
            )


def _check_selection(suite: Any, features: list[str] | None, impls: list[str] | None) -> None:
    """--feature/--impl must select something: an empty run would store nothing and exit 0."""
    available = suite.targets(features)
    if not impls:
        return
    known = sorted({impl for _, impl, _ in available})
    unknown = sorted(set(impls) - set(known))
    if unknown:
        scope = f" of {', '.join(features)}" if features else ""
        raise KernelPolicyError(
            f"--impl {unknown[0]!r}: no built-in implementation{scope} has that name; known: "
            f"{', '.join(known)}"
        )


def _settings() -> Any:
    from kernelpolicy.settings import load_settings

    return load_settings()


def _print_table(reports: list[Any], stored: str | None, profile: str) -> None:
    from kernelpolicy.render import table

    if profile != "full":
        print(f"profile: {profile} (fewer samples and patterns: a smoke run, not evidence)")

    rows = []
    for r in reports:
        passed = sum(o.passed for o in r.outcomes)
        failing = next((o for o in r.outcomes if o.status == "failed"), None)
        note = r.skipped or (f"{failing.check}: {failing.detail}" if failing else "")
        if not note and r.differs:  # right under its own rule, not kernelpolicy's convention
            note = f"{len(r.differs)} differ: {r.differs[0].convention} ({r.differs[0].check})"
        checks = "-" if r.skipped else f"{passed}/{len(r.outcomes)}"
        rows.append([r.feature, r.impl, r.status, checks, f"{r.seconds:.1f}s", note])
    print(table(["feature", "impl", "status", "checks", "time", "note"], rows, indent=""))
    if stored:
        print(f"\nevidence stored: {stored}")
    elif profile != "full":
        print(f"\nnot stored: a {profile} run is never evidence; run without --{profile} to store")
