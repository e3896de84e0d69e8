"""Which release of an inference engine the bridge's rules are matched for, and the operator's
variables that release does not read (from the knob tables, :mod:`kernelpolicy.knobs`)."""

from __future__ import annotations

from collections.abc import Mapping

from packaging.version import Version

from kernelpolicy.knobs import KnobTable, knob_table
from kernelpolicy.limits import shown
from kernelpolicy.versions import StackVersion, parse_version


class MatchedRelease:
    """Which release of ``engine`` the rules are matched for: the version given or installed;
    the newest release of the knob tables where there is none or it is newer than the tables
    (:mod:`kernelpolicy.knobs`); and the operator's variables that release does not read."""

    def __init__(self, engine: str, version: str | None) -> None:
        self.engine = engine
        self.table = knob_table(engine)
        parsed = parse_version(version) if version else None
        given = parsed.value if isinstance(parsed, StackVersion) else None
        self.matched: Version | None = given
        # the table's release the rules were matched as, whose knobs are checked; None where
        # that is no release of the tables
        self.known: str | None = None
        self.note: str | None = None
        if version is not None and given is None:
            self.note = (
                f"{engine} version {shown(version)!r} unreadable: its rules are matched as for "
                "the newest release they list; pass --engine-version to choose"
            )
        elif self.table is not None:
            self._match(version, given, self.table)
        elif given is None:
            self.note = (
                f"{engine} not installed here: its rules are matched as for the newest release "
                "they list; pass --engine-version to choose"
            )

    def _match(self, version: str | None, given: Version | None, table: KnobTable) -> None:
        newest = Version(table.newest)
        # a local label (0.33.0+rocm711, 0.32.0+cpu) names a build of that release, not a newer one
        if given is not None and Version(given.public) <= newest:
            self.known = table.known_release(given)  # None: between known releases, no check
            return
        self.matched, self.known = newest, table.newest
        if given is None:
            self.note = (
                f"{self.engine} not installed here: matched as {self.engine} {table.newest}, the "
                "newest release kernelpolicy's knob tables know; pass --engine-version to choose"
            )
        else:
            self.note = (
                f"{self.engine} {shown(version or '')} is newer than the newest release "
                f"kernelpolicy's knob tables know: matched as {table.newest} (regenerate the "
                "tables with scripts/gen_engine_tables.py when a release changes its knobs)"
            )

    def reads(self, name: str) -> bool:
        """The release the rules are matched for defines and reads variable ``name``: the
        table's release, or for a version between known releases the newest known below it."""
        table = self.table
        if table is None:
            return False
        release = self.known
        if release is None and self.matched is not None:
            below = [r for r in table.releases if Version(r) <= self.matched]
            release = below[-1] if below else None
        knob = table.env(name, release) if release is not None else None
        return knob is not None and knob.defined and knob.read_in is not None

    def unread(self, env: Mapping[str, str]) -> list[str]:
        """One warning per variable of this engine set in ``env`` that the release does not
        define, or defines and reads nowhere, with its replacement where the tables know it."""
        table, release = self.table, self.known
        if table is None or release is None:
            return []
        warnings = []
        for name in sorted(n for n in env if table.prefixed(n)):
            knob = table.env(name, release)
            if knob is not None and knob.defined and knob.read_in is not None:
                continue
            what = (
                "does not define it: it is ignored"
                if knob is None or not knob.defined
                else "defines it but reads it nowhere: it has no effect"
            )
            text = f"{name} is set, but {self.engine} {release} {what}"
            if name in table.replaced:
                text += f"; its replacement: {table.replaced[name]}"
            warnings.append(text)
        return warnings
