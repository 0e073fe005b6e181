"""Every `ade-tasks` command line of the docs checked against the CLI's parser.

The lines of shell blocks (`sh`, `bash`, `shell`; in `console` blocks the `$ ` lines), the `$ `
and `ade-tasks ...` lines of other blocks, and inline code that starts with `ade-tasks` (in a
table cell beside one, also a span that starts with another command's name, such as
`rules validate [DIR]`). A synopsis (`[--json]`, `RUN_ID`, `a|b`, `...`) is checked for its
command path, option names and arity, and choices; a concrete command line is parsed by click as
the shell would run it. Each failure names file:line and what to change.
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click

from ade_api.cli import main as cli
from tests.unit.deploy.command_lines import PASSTHROUGH, _option_names
from tests.unit.docs.doc_pages import Block, read_markdown

CLI_REFERENCE = "docs/reference/cli.md"
HELP_OPTIONS = ("-h", "--help")


SHELL_LANGS = {"sh", "bash", "shell", "zsh", "console", "shell-session"}
DATA_LANGS = {"yaml", "yml", "json", "toml", "ini", "python", "py", "html", "sql", "promql"}
OPERATORS = set(";&|()<>")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_-]*$|…|\.\.\.|^<.*>$|\$")
ELLIPSES = ("...", "…")
ADE = re.compile(r"^(\S*/)?ade-tasks$")


@dataclass(frozen=True)
class Invocation:
    """`ade-tasks ARGV...` found at `where`; `complete`: a line to run, not a mention in prose."""

    where: str
    argv: tuple[str, ...]
    complete: bool

    @property
    def shown(self) -> str:
        return "ade-tasks " + " ".join(self.argv)


def shell_lines(block: Block) -> Iterator[tuple[int, str]]:
    """The command lines of a block: continuations joined, prompts removed."""
    pending, start = "", 0
    for number, raw in enumerate(block.text.splitlines(), block.line):
        if not pending:
            start = number
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        line, pending = (pending + raw).strip(), ""
        if _open_quote(line):  # a quoted string goes on to the next line, as in the shell
            pending = line + "\n"
            continue
        prompt = line.startswith("$ ")
        if prompt:
            line = line[2:]
        first = line.split(maxsplit=1)[0] if line else ""
        if prompt or (block.lang in SHELL_LANGS - {"console"}) or ADE.match(first):
            yield start, line


def _open_quote(line: str) -> bool:
    try:
        shlex.split(line, comments=True)
    except ValueError as exc:
        return "closing quotation" in str(exc)
    return False


def simple_commands(line: str) -> Iterator[list[str]]:
    """The simple commands of a shell line (split at `;`, `&&`, `|`, ...; `sh -c` opened)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    command: list[str] = []
    for token in [*lexer, ";"]:
        if set(token) <= OPERATORS:
            yield from _opened(command)
            command = []
        else:
            command.append(token)


def _opened(command: list[str]) -> Iterator[list[str]]:
    for index, token in enumerate(command[:-1]):
        if token == "-c" and index and Path(command[index - 1]).name in ("sh", "bash"):
            yield from simple_commands(command[index + 1])
            return
    if command:
        yield command


def invocations_in_line(line: str, where: str) -> Iterator[Invocation]:
    try:
        commands = list(simple_commands(line))
    except ValueError as exc:
        raise AssertionError(f"{where}: the shell cannot read {line!r}: {exc}") from None
    for command in commands:
        for index, token in enumerate(command):
            if ADE.match(token):
                yield Invocation(where, tuple(command[index + 1 :]), complete=True)
                break


def span_invocation(text: str, where: str, in_ade_cell: bool) -> Invocation | None:
    text = text.replace("\\|", "|")
    try:
        words = shlex.split(text)
    except ValueError:
        words = text.split()
    if words and ADE.match(words[0]):
        return Invocation(where, tuple(words[1:]), complete=False)
    if in_ade_cell and words and words[0] in top_commands():
        return Invocation(where, tuple(words), complete=False)
    return None


def doc_invocations(path: Path) -> list[Invocation]:
    blocks, spans = read_markdown(path)
    found: list[Invocation] = []
    for block in blocks:
        if block.lang not in DATA_LANGS:
            for line_number, line in shell_lines(block):
                found += invocations_in_line(line, f"{block.file}:{line_number}")
    ade_cells = {s.cell for s in spans if s.cell is not None and s.text.startswith("ade-tasks")}
    for span in spans:
        invocation = span_invocation(span.text, f"{span.file}:{span.line}", span.cell in ade_cells)
        if invocation is not None:
            found.append(invocation)
    return found


def top_commands() -> list[str]:
    assert isinstance(cli, click.Group)
    return cli.list_commands(click.Context(cli))


def _options(command: click.Command) -> dict[str, click.Parameter]:
    table: dict[str, click.Parameter] = {}
    for param in command.params:
        if isinstance(param, click.Option):
            for name in (*param.opts, *param.secondary_opts):
                table[name] = param
    return table


def _takes_value(param: click.Parameter) -> bool:
    return isinstance(param, click.Option) and not (param.is_flag or param.count)


def _value_problems(param: click.Parameter, value: str, where: str) -> list[str]:
    """A value as written (`a|b`: each alternative) must be one the parameter takes."""
    if PLACEHOLDER.search(value):
        return []
    problems = []
    for alternative in value.split("|") if isinstance(param.type, click.Choice) else [value]:
        try:
            param.type.convert(alternative, param, None)
        except click.BadParameter as exc:
            problems.append(f"{where}: {param.human_readable_name} {alternative!r}: {exc.message}")
        except Exception:  # a type that needs a context cannot be judged here
            pass
    return problems


def _normalized(argv: tuple[str, ...]) -> tuple[list[str], bool]:
    """Synopsis brackets stripped; and is it a synopsis (or has placeholders)?"""
    tokens = [t.strip("[]") for t in argv]
    tokens = [t for t in tokens if t]
    synopsis = any(t != t.strip("[]") or PLACEHOLDER.search(t) or "|" in t for t in argv)
    return tokens, synopsis


def invocation_problems(invocation: Invocation) -> list[str]:
    tokens, synopsis = _normalized(invocation.argv)
    return _command_problems(cli, ["ade-tasks"], tokens, synopsis, invocation)


def _command_problems(
    command: click.Command, path: list[str], tokens: list[str], synopsis: bool, at: Invocation
) -> list[str]:
    where = f"{at.where}: `{at.shown}`"
    while isinstance(command, click.Group):
        options = _options(command)
        while tokens and tokens[0].startswith("-"):
            option = tokens.pop(0)
            if option not in options and option not in HELP_OPTIONS:
                return [f"{where}: `{' '.join(path)}` has no option {option}"]
            if option in HELP_OPTIONS or option == "--version":
                return []
        if not tokens:
            if at.complete:
                return [f"{where}: `{' '.join(path)}` needs a subcommand; name one"]
            return []  # prose naming a group of commands
        names = command.list_commands(click.Context(command))
        wanted = tokens.pop(0)
        problems = []
        for name in wanted.split("|"):
            sub = command.get_command(click.Context(command), name)
            if sub is None:
                near = difflib.get_close_matches(name, names, 1)
                hint = f" (did you mean `{near[0]}`?)" if near else ""
                problems.append(
                    f"{where}: `{' '.join([*path, name])}` does not exist{hint}; "
                    f"`{' '.join(path)}` has: {', '.join(names)}"
                )
            elif "|" in wanted:
                problems += _command_problems(sub, [*path, name], list(tokens), synopsis, at)
            else:
                command, path = sub, [*path, name]
        if problems or "|" in wanted:
            return problems
    return _leaf_problems(command, path, tokens, synopsis, at)


def _leaf_problems(
    command: click.Command, path: list[str], tokens: list[str], synopsis: bool, at: Invocation
) -> list[str]:
    where = f"{at.where}: `{at.shown}`"
    options = _options(command)
    passthrough = _option_names(PASSTHROUGH[path[-1]]) if path[-1] in PASSTHROUGH else {}
    problems: list[str] = []
    positionals: list[str] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if token in HELP_OPTIONS:
            return problems
        if token in ELLIPSES:  # "and more of the same"
            continue
        if not token.startswith("-") or re.fullmatch(r"-\d+(\.\d+)?", token):
            positionals.append(token)
            continue
        name, equals, value = token.partition("=")
        param = options.get(name) or passthrough.get(name)
        if param is None:
            near = difflib.get_close_matches(name, [*options, *passthrough], 1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            problems.append(f"{where}: `{' '.join(path)}` has no option {name}{hint}")
            continue
        if _takes_value(param) and not equals:
            if index >= len(tokens):
                problems.append(f"{where}: {name} needs a value (`{name} VALUE`)")
                break
            value, index = tokens[index], index + 1
        if _takes_value(param) and name in options:
            problems += _value_problems(param, value, where)
    arguments = [p for p in command.params if isinstance(p, click.Argument)]
    if passthrough or any(a.nargs == -1 for a in arguments):
        return problems
    if len(positionals) > sum(a.nargs for a in arguments):
        names = " ".join(a.human_readable_name for a in arguments) or "no arguments"
        problems.append(f"{where}: `{' '.join(path)}` takes {names}, got {positionals}")
    for argument, value in zip(arguments, positionals, strict=False):
        problems += _value_problems(argument, value, where)
    if problems or not at.complete:
        return problems
    if synopsis:
        required = [a for a in arguments if a.required]
        if len(positionals) < len(required):
            problems.append(f"{where}: `{' '.join(path)}` needs {required[-1].human_readable_name}")
        return problems
    try:  # a concrete command line: click parses it as the shell would run it
        # With the root's context settings, as under the root: click keeps the help option it
        # builds on the command, so one built without `-h` would refuse `-h` in later tests.
        command.make_context(
            " ".join(path), list(tokens), resilient_parsing=False, **cli.context_settings
        )
    except click.ClickException as exc:
        problems.append(f"{where}: {exc.format_message()}")
    return problems


def leaf_paths(command: click.Command = cli, path: tuple[str, ...] = ()) -> Iterator[str]:
    if isinstance(command, click.Group):
        context = click.Context(command)
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            if sub is not None and not sub.hidden:
                yield from leaf_paths(sub, (*path, name))
    else:
        yield " ".join(path)


def documented_paths(invocations: list[Invocation]) -> set[str]:
    """The command paths the invocations name (alternatives `a|b` each)."""
    paths: set[str] = set()
    for invocation in invocations:
        tokens, _ = _normalized(invocation.argv)
        command: click.Command = cli
        path: list[str] = []
        while isinstance(command, click.Group) and tokens and not tokens[0].startswith("-"):
            names = tokens.pop(0).split("|")
            subs = [command.get_command(click.Context(command), n) for n in names]
            for name, sub in zip(names, subs, strict=True):
                if sub is not None and not isinstance(sub, click.Group):
                    paths.add(" ".join([*path, name]))
            if len(names) > 1 or subs[0] is None:
                break
            command, path = subs[0], [*path, names[0]]
    return paths
