"""The CLI's argument parser: argparse with "did you mean" for commands, choices and options.

argparse (before Python 3.14's ``suggest_on_error``) lists the choices of a mistyped command
and says nothing for a mistyped option; git and kubectl name the close ones. Abbreviations stay
off (``allow_abbrev=False``, see :func:`~kernelpolicy.cli.common.disable_abbreviations`): a
suggestion is said, never acted on.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from kernelpolicy.suggest import close_names, did_you_mean


class SuggestingParser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` whose usage errors name the close alternatives.

    Sub-command parsers are of the same class (argparse makes them with ``type(self)``).
    """

    _last: argparse.Namespace | None = None
    _words: tuple[str, ...] = ()  # what this parser was given, for a required option's typo

    def __init__(self, *args: Any, option_notes: Mapping[str, str] | None = None, **kw: Any):
        """As argparse's, plus ``option_notes``: what to say of an option this command does
        not take but a user may reach for (``check --policies``: check takes PATH...)."""
        super().__init__(*args, **kw)
        self.option_notes: Mapping[str, str] = dict(option_notes or {})

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as exc:
            choices = action.choices if action.choices is not None else ()
            hint = did_you_mean(str(value), [str(c) for c in choices])
            if not hint:
                raise
            listed = ", ".join(repr(str(c)) for c in choices)
            raise argparse.ArgumentError(
                action, f"invalid choice: {value!r}{hint} (choose from {listed})"
            ) from exc

    def parse_known_args(  # type: ignore[override]  # one signature for argparse's overloads
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._words = tuple(sys.argv[1:] if args is None else args)
        parsed, extras = super().parse_known_args(args, namespace)
        self._last = parsed
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        """The usage of the command the error is about (the sub-command's where one was given),
        then one line that starts ``kernelpolicy: error:`` for every command."""
        prefix = "unrecognized arguments: "
        if message.startswith(prefix) and self._last is not None:
            message += self._hints(message[len(prefix) :].split())
        elif message.startswith("the following arguments are required: "):
            # argparse says this before the unknown options: name a typo of the missing one
            known = self._option_string_actions
            message += self._hints([w for w in self._words if w.split("=", 1)[0] not in known])
        (self._command_parser() or self).print_usage(sys.stderr)
        self.exit(2, f"{self.prog.split()[0]}: error: {message}\n")

    def missing_command(self) -> None:
        """No sub-command given: the usage and the commands on stderr, then the error line
        (stdout stays empty, as for every exit 2; ``--help`` prints the full help there)."""
        formatter = self._get_formatter()
        formatter.add_usage(self.usage, self._actions, self._mutually_exclusive_groups)
        formatter.start_section("commands")
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                formatter.add_arguments(action._get_subactions())
        formatter.end_section()
        sys.stderr.write(formatter.format_help())
        prog = self.prog.split()[0]
        sys.stderr.write(f"{prog}: error: no command given; '{prog} --help' shows examples\n")

    def _command_parser(self) -> argparse.ArgumentParser | None:
        """The parser of the sub-command just parsed, if any."""
        command = getattr(self._last, "subcommand", None)
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and command in action.choices:
                parser: argparse.ArgumentParser = action.choices[command]
                return parser
        return None

    def _hints(self, words: list[str]) -> str:
        """``" (--jsn: did you mean --json?)"``: for each unknown option, the close ones of the
        command; else its note; else the other commands that take it."""
        command = self._command_parser()
        # after a command, only its own options may follow (the top-level --version may not)
        options = list((command or self)._option_string_actions)
        notes = command.option_notes if isinstance(command, SuggestingParser) else {}
        hints = []
        for word in words:
            if not word.startswith("-") or word == "-":
                continue
            name = word.split("=", 1)[0]
            hint = _close_option(name, options) or notes.get(name) or self._taken_by(name)
            if hint:
                hints.append(f"{name}: {hint}")
        return f" ({'; '.join(hints)})" if hints else ""

    def _taken_by(self, option: str) -> str:
        """``"not an option of exec; env, explain take it"``, or ``""``."""
        command = getattr(self._last, "subcommand", None)
        others = [
            name
            for action in self._actions
            if isinstance(action, argparse._SubParsersAction)
            for name, parser in action.choices.items()
            if name != command and option in parser._option_string_actions
        ]
        if command is None or not others:
            return ""
        if len(others) > 3:  # --json: most commands; their list would say nothing
            return f"not an option of {command}"
        return f"not an option of {command}; {', '.join(others)} take{'s' * (len(others) == 1)} it"


def _close_option(name: str, options: list[str]) -> str:
    """``"did you mean --json?"`` for an unknown option with close known ones, or ``""``."""
    bare = {o.lstrip("-"): o for o in options}
    close = close_names(name.lstrip("-"), bare)
    return f"did you mean {' or '.join(bare[c] for c in close)}?" if close else ""
