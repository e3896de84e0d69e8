"""Shell completion scripts for bash and zsh, generated from the argument parser.

Nothing is written by hand per command: a command, option or choice added to the parser is in
the next generated script. What each word completes to:

* the first word: the commands;
* after an option with choices (``--format``, ``--model-kind``): its choices;
* after an option that takes a file or directory (``type=Path``, or a FILE/DIR/PATH metavar):
  file names;
* a word starting with ``-``: the command's options; otherwise its positional choices
  (``completion bash|zsh``), else file names.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from pathlib import Path

_PATH_METAVARS = {"FILE", "DIR", "PATH", "FILES"}


@dataclass
class Command:
    """What completion needs of one sub-command."""

    name: str
    help: str
    options: list[str] = field(default_factory=list)
    choices: dict[str, list[str]] = field(default_factory=dict)  # option -> its choices
    paths: list[str] = field(default_factory=list)  # options that take a file or directory
    valued: list[str] = field(default_factory=list)  # options that take any value
    positional: list[str] = field(default_factory=list)  # choices of the positional words
    helps: dict[str, str] = field(default_factory=dict)


def commands_of(parser: argparse.ArgumentParser) -> list[Command]:
    """Every sub-command of ``parser``, with its options and their kinds, in parser order."""
    found = []
    for action in parser._actions:  # argparse has no public walk over sub-parsers
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {a.dest: a.help or "" for a in action._choices_actions}
        for name, sub in action.choices.items():
            found.append(_command(name, helps.get(name, ""), sub))
    return found


def _command(name: str, help_text: str, parser: argparse.ArgumentParser) -> Command:
    command = Command(name, help_text)
    for action in parser._actions:
        if not action.option_strings:
            if action.choices is not None:
                command.positional += [str(c) for c in action.choices]
            continue
        command.options += action.option_strings
        for option in action.option_strings:
            command.helps[option] = action.help or ""
        if action.nargs == 0:
            continue
        if action.choices is not None:
            for option in action.option_strings:
                command.choices[option] = [str(c) for c in action.choices]
        elif action.type is Path or str(action.metavar) in _PATH_METAVARS:
            command.paths += action.option_strings
        else:
            command.valued += action.option_strings
    return command


def bash_script(parser: argparse.ArgumentParser, prog: str = "kernelpolicy") -> str:
    """A bash completion script: ``source <(kernelpolicy completion bash)``."""
    commands = commands_of(parser)
    func = "_" + re.sub(r"\W", "_", prog)
    lines = [
        f"# {prog} completion for bash, generated from its argument parser",
        f"# ({prog} completion bash > /etc/bash_completion.d/{prog}, or source it)",
        f"{func}() {{",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
        '    local cmd="" i',
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        '        case "${COMP_WORDS[i]}" in -*) ;; *) cmd="${COMP_WORDS[i]}"; break ;; esac',
        "    done",
        '    if [[ -z "$cmd" ]]; then',
        f'        COMPREPLY=($(compgen -W "{" ".join(c.name for c in commands)} -h --help '
        '--version" -- "$cur"))',
        "        return",
        "    fi",
        '    case "$cmd:$prev" in',
        *_bash_value_arms(commands),
    ]
    lines += ["    esac", '    local opts="" words=""', '    case "$cmd" in']
    for command in commands:
        words = " ".join(command.positional)
        lines.append(
            f'        {command.name}) opts="{" ".join(command.options)}"; words="{words}" ;;'
        )
    lines += [
        "    esac",
        '    if [[ "$cur" == -* ]]; then',
        '        COMPREPLY=($(compgen -W "$opts" -- "$cur"))',
        '    elif [[ -n "$words" ]]; then',
        '        COMPREPLY=($(compgen -W "$words" -- "$cur"))',
        "    else",
        '        COMPREPLY=($(compgen -f -- "$cur"))',
        "    fi",
        "}",
        f"complete -o filenames -F {func} {prog}",
    ]
    return "\n".join(lines) + "\n"


def _bash_value_arms(commands: list[Command]) -> list[str]:
    """The ``case "$cmd:$prev"`` arms, for the word after an option: its choices, file names,
    or nothing (an option that takes any value)."""
    arms = []
    for command in commands:
        for option, choices in command.choices.items():
            words = " ".join(choices)
            arms.append(
                f'        {command.name}:{option}) COMPREPLY=($(compgen -W "{words}" -- "$cur")); '
                "return ;;"
            )
        for option in command.paths:
            arms.append(
                f'        {command.name}:{option}) COMPREPLY=($(compgen -f -- "$cur")); return ;;'
            )
        for option in command.valued:
            arms.append(f"        {command.name}:{option}) COMPREPLY=(); return ;;")
    return arms


def _zsh_text(text: str) -> str:
    """Help text safe inside a single-quoted ``_arguments`` spec: its first clause, without
    the characters that spec syntax gives a meaning to."""
    first = re.split(r"[;(]", text, maxsplit=1)[0].strip()
    return re.sub(r"[\[\]:'\\`$]", "", first)[:70]


def _zsh_spec(command: Command, option: str) -> str:
    help_text = _zsh_text(command.helps.get(option, ""))
    if option in command.choices:
        return f"'{option}[{help_text}]:value:({' '.join(command.choices[option])})'"
    if option in command.paths:
        return f"'*{option}[{help_text}]:file:_files'"
    if option in command.valued:
        return f"'*{option}[{help_text}]:value: '"
    return f"'{option}[{help_text}]'"


def zsh_script(parser: argparse.ArgumentParser, prog: str = "kernelpolicy") -> str:
    """A zsh completion script: put it on ``$fpath`` as ``_kernelpolicy``, or source it."""
    commands = commands_of(parser)
    func = "_" + re.sub(r"\W", "_", prog)
    lines = [
        f"#compdef {prog}",
        f"# {prog} completion for zsh, generated from its argument parser",
        f"{func}() {{",
        "    local -a commands",
        "    commands=(",
        *(f"        '{c.name}:{_zsh_text(c.help)}'" for c in commands),
        "    )",
        "    if (( CURRENT == 2 )); then",
        "        _describe -t commands command commands",
        "        return",
        "    fi",
        "    local cmd=${words[2]}",
        "    shift words",
        "    (( CURRENT-- ))",
        "    case $cmd in",
    ]
    for command in commands:
        specs = [_zsh_spec(command, o) for o in command.options]
        rest = (
            f"'*:word:({' '.join(command.positional)})'"
            if command.positional
            else "'*:file:_files'"
        )
        lines.append(f"        {command.name}) _arguments -s {' '.join([*specs, rest])} ;;")
    lines += ["    esac", "}", f'if [[ "$funcstack[1]" == "{func}" ]]; then', f'    {func} "$@"',
              "else", f"    compdef {func} {prog}", "fi"]  # fmt: skip
    return "\n".join(lines) + "\n"
