"""Docs that cannot drift (issue 37, finding 10): every YAML example and every `ade-tasks` command
line in the docs is checked against the code that would read it.

Where: README.md, every page under docs/ (docs/deployment.md includes deploy/README.md, so that
is read too) and every YAML file under config/; a page or file added later is checked from its
first day.

YAML: each fenced `yaml` block is recognized by its shape and checked as what it is: a rule or a
list of rules (the rule loader, as `rules validate` runs it), a part of a rule (steps, `triggers:`,
`guardrails:`, `outputs:`, ...: validated inside a minimal rule), step conditions (the condition
parser), or a file of another tool (Compose, Kubernetes, Prometheus rules, a GitHub Actions
workflow, MkDocs: it must parse and have that tool's top-level shape). A block that is none of
these fails, naming where, so a new kind of example gets its check added here.

Commands: the lines of shell blocks (`sh`, `bash`, `shell`; in `console` blocks the `$ ` lines),
the `$ ` and `ade-tasks ...` lines of other blocks, and inline code that starts with `ade-tasks`
(in a table cell beside one, also a span that starts with another command's name, such as
`rules validate [DIR]`). A synopsis (`[--json]`, `RUN_ID`, `a|b`, `...`) is checked for its
command path, option names and arity, and choices; a concrete command line is parsed by click as
the shell would run it. Each failure names file:line and what to change.
"""

from __future__ import annotations

import ast
import difflib
import functools
import io
import re
import shlex
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from markdown_it import MarkdownIt

from ade_api.cli import main as cli
from ade_api.dev_model import ScriptError, parse_script
from ade_tasks.rules.conditions import ConditionError, parse_condition
from ade_tasks.rules.loader import load_rules_dir, parse_rule
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.steps import ACTION_MODELS
from tests.unit.deploy.test_deploy_files import PASSTHROUGH, _option_names

ROOT = Path(__file__).resolve().parents[3]
CLI_REFERENCE = "docs/reference/cli.md"
HELP_OPTIONS = ("-h", "--help")


def doc_files() -> list[Path]:
    """README.md, deploy/README.md (included by docs/deployment.md) and every page of docs/."""
    return [ROOT / "README.md", ROOT / "deploy" / "README.md", *sorted(ROOT.glob("docs/**/*.md"))]


# --- reading markdown -------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """A fenced code block: its language and text, and the line its text starts on."""

    file: str
    line: int
    lang: str
    text: str


@dataclass(frozen=True)
class Span:
    """Inline code; `cell`: the table cell it is in (spans of one cell share it), else None."""

    file: str
    line: int
    text: str
    cell: int | None


@functools.cache
def read_markdown(path: Path) -> tuple[list[Block], list[Span]]:
    source = path.read_text()
    name = str(path.relative_to(ROOT))
    tokens = MarkdownIt("commonmark").enable("table").parse(source)
    blocks: list[Block] = []
    spans: list[Span] = []
    for index, token in enumerate(tokens):
        if token.type == "fence" and token.map:
            lang = (token.info.split() or [""])[0].lower()
            blocks.append(Block(name, token.map[0] + 2, lang, token.content))
        elif token.type == "inline" and token.map:
            in_cell = index > 0 and tokens[index - 1].type in ("td_open", "th_open")
            cursor = 0
            for child in token.children or []:
                if child.type != "code_inline":
                    continue
                # Code spans fold line breaks into spaces: find the span in the raw text.
                words = [re.escape(word) for word in child.content.split()]
                found = re.compile(r"\s+".join(words)).search(token.content, cursor)
                offset = found.start() if found else cursor
                cursor = found.end() if found else cursor
                line = token.map[0] + 1 + token.content.count("\n", 0, offset)
                spans.append(Span(name, line, child.content, index if in_cell else None))
    return blocks, spans


# --- YAML: every example is checked as what it is ----------------------------------------------


class UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses a key given twice (the reader sees both, the loader keeps one)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


RULE_FIELDS = {alias or name for name, f in Rule.model_fields.items() for alias in (f.alias, None)}
MANUAL_RULE: dict[str, Any] = {
    "id": "example",
    "triggers": [{"type": "manual"}],
    "execution": {"kind": "built-in", "actions": [{"id": "example", "type": "run-command",
                                                   "command": "true"}]},
}  # fmt: skip
#: Files of other tools that the docs show, recognized by their top-level keys.
OTHER_TOOLS = {
    "Docker Compose": lambda d: isinstance(d.get("services"), dict),
    "Kubernetes": lambda d: {"apiVersion", "kind"} <= d.keys(),
    "Prometheus rules": lambda d: isinstance(d.get("groups"), list),
    "Prometheus configuration": lambda d: isinstance(d.get("scrape_configs"), list),
    "GitHub Actions workflow": lambda d: "jobs" in d and ("on" in d or True in d),
    "MkDocs": lambda d: "site_name" in d,
}


def is_step(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") in ACTION_MODELS and "triggers" not in item


def yaml_problems(document: Any, where: str) -> list[str]:
    """What is wrong with one YAML document of the docs, as `file:line...: reason` lines."""

    def rule(candidate: Any) -> list[str]:
        parsed = parse_rule(candidate, where)
        return [] if isinstance(parsed, Rule) else [str(problem) for problem in parsed]

    if (
        isinstance(document, list)
        and document
        and all(isinstance(item, dict) and "triggers" in item for item in document)
    ):
        return [p for item in document for p in rule(item)]
    if isinstance(document, list) and document and all(map(is_step, document)):
        return rule({**MANUAL_RULE, "execution": {"kind": "built-in", "actions": document}})
    if is_step(document):
        return rule({**MANUAL_RULE, "execution": {"kind": "built-in", "actions": [document]}})
    conditions = document if isinstance(document, list) else [document]
    if conditions and all(isinstance(c, dict) and c.keys() == {"condition"} for c in conditions):
        problems = []
        for item in conditions:
            try:
                parse_condition(str(item["condition"]), where)
            except ConditionError as exc:
                problems.append(str(exc))  # it names `where`
        return problems
    if isinstance(document, dict) and "id" in document and document.keys() <= RULE_FIELDS:
        return rule(document)
    if isinstance(document, dict) and document and document.keys() <= RULE_FIELDS:
        return rule({**MANUAL_RULE, **document})  # a part of a rule: `triggers:`, `guardrails:`
    if isinstance(document, dict) and document.keys() == {"turns"}:  # a `dev-model --script`
        try:
            parse_script(yaml.safe_dump(document), where)
        except ScriptError as exc:
            return [str(exc)]
        return []
    if isinstance(document, dict) and any(shape(document) for shape in OTHER_TOOLS.values()):
        return []
    shown = sorted(map(str, document)) if isinstance(document, dict) else type(document).__name__
    return [
        f"{where}: a YAML block that is no rule, part of a rule, list of steps, condition or "
        f"known file ({', '.join(OTHER_TOOLS)}); it holds {shown}. Make it one of those, or teach "
        "yaml_problems in tests/unit/docs/test_examples.py its kind and how to check it"
    ]


def yaml_block_problems(block: Block) -> list[str]:
    where = f"{block.file}:{block.line}"
    try:
        documents = list(yaml.load_all(block.text, Loader=UniqueKeyLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = block.line + mark.line if mark is not None else block.line
        return [f"{block.file}:{line}: malformed YAML: {getattr(exc, 'problem', None) or exc}"]
    if not any(d is not None for d in documents):
        return [f"{where}: the YAML block holds nothing; write the example or drop the block"]
    return [p for d in documents if d is not None for p in yaml_problems(d, where)]


def yaml_blocks() -> list[Block]:
    return [b for p in doc_files() for b in read_markdown(p)[0] if b.lang in ("yaml", "yml")]


# --- commands: every `ade-tasks` line against the CLI's parser ---------------------------------

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
        command.make_context(" ".join(path), list(tokens), resilient_parsing=False)
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


# --- cited files exist -------------------------------------------------------------------------

REPO_PATH = re.compile(
    r"(ade_tasks|ade_workers|ade_api|tests|bench|deploy|docs|config)/[\w./-]*(:\w+)?"
)
CITED_MD = re.compile(r"(?<![\w./-])(?:docs/[\w./-]+|[A-Z][A-Z_]*)\.md\b")
#: Files the docs and code name that are not in the repository, each with the reason.
NOT_IN_THE_REPOSITORY = {
    "config/rules/disk-usage.yaml": "README.md's first rule, which the reader writes",
    "deploy/ade.env": "the optional secrets file a Compose user writes (deploy/README.md)",
    "AGENTS.md": "the instructions file codex reads in a project an agent works on",
    "docs/x.md": "a changed file in a test's example event",
    "config/rules/pr-opened.yaml": "the rule docs/recipes/local-github-delivery.md has you write",
    "config/rules/try-agent.yaml": "the rule docs/recipes/try-an-agent-step.md has you write",
    "config/rules/shared/": "where a team puts another team's rules (docs/rules.md)",
}


def _exists(cited: str) -> bool:
    path = cited.split(":", 1)[0]
    module = path.rsplit(".", 1)[0] + ".py"  # `pkg/module.function`
    return cited in NOT_IN_THE_REPOSITORY or (ROOT / path).exists() or (ROOT / module).exists()


def python_prose(path: Path) -> Iterator[tuple[int, str]]:
    """The comments and docstrings of a Python file, with their lines (none without `.md`)."""
    source = path.read_text()
    if ".md" not in source:
        return
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            docstring = ast.get_docstring(node, clean=False)
            if docstring:
                yield getattr(node, "lineno", 1), docstring


# --- the tests ---------------------------------------------------------------------------------


def test_every_yaml_example_in_the_docs_is_checked_as_what_it_is() -> None:
    blocks = yaml_blocks()
    assert len(blocks) > 40, "the docs' YAML examples are not found"
    problems = [p for block in blocks for p in yaml_block_problems(block)]
    assert not problems, "\n".join(problems)


def test_every_yaml_file_under_config_loads() -> None:
    rules = load_rules_dir(ROOT / "config" / "rules")
    assert rules.rules and not rules.problems, "\n".join(map(str, rules.problems))
    for path in sorted(ROOT.glob("config/**/*.y*ml")):
        if (ROOT / "config" / "rules") in path.parents:
            continue
        text = path.read_text()
        block = Block(str(path.relative_to(ROOT)), 1, "yaml", text)
        assert not yaml_block_problems(block), yaml_block_problems(block)


def test_every_ade_tasks_command_in_the_docs_parses() -> None:
    invocations = [i for path in doc_files() for i in doc_invocations(path)]
    assert len(invocations) > 150, "the docs' command lines are not found"
    assert sum(i.complete for i in invocations) > 40
    problems = [p for invocation in invocations for p in invocation_problems(invocation)]
    assert not problems, "\n".join(problems)


def test_the_cli_reference_names_every_command() -> None:
    documented = documented_paths(doc_invocations(ROOT / CLI_REFERENCE))
    missing = [path for path in leaf_paths() if path not in documented]
    assert not missing, "\n".join(
        f"{CLI_REFERENCE}: no row names `ade-tasks {path}`; add one with its options"
        for path in missing
    )


def test_the_docs_cite_only_files_that_exist() -> None:
    missing = [
        f"{span.file}:{span.line}: `{span.text}` is not in the repository; fix the path, or add "
        "it to NOT_IN_THE_REPOSITORY with the reason"
        for path in doc_files()
        for span in read_markdown(path)[1]
        if REPO_PATH.fullmatch(span.text) and not _exists(span.text)
    ]
    assert not missing, "\n".join(missing)


def test_code_and_tests_cite_only_docs_that_exist() -> None:
    """No comment or docstring sends a reader to a page that is not there (issue 37 found
    three tests and docs/operations.md citing a design document the repository does not hold)."""
    sources = [p for d in ("ade_tasks", "ade_workers", "ade_api", "tests", "bench")
               for p in sorted((ROOT / d).rglob("*.py"))]  # fmt: skip
    missing = [
        f"{path.relative_to(ROOT)}:{line}: cites {cited}, which is not in the repository; "
        "point at the page of docs/ that says it, or say it here"
        for path in sources
        for line, prose in python_prose(path)
        for cited in CITED_MD.findall(prose)
        if not _exists(cited)
    ]
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize(
    ("line", "complete", "wanted"),
    [
        ("ade-tasks runs shw RUN_ID", True, "does not exist (did you mean `show`?)"),
        ("ade-tasks runs list --limt 3", True, "has no option --limt"),
        ("ade-tasks runs list --limit many", True, "'many' is not a valid integer"),
        ("ade-tasks runs list --limit", True, "--limit needs a value"),
        ("ade-tasks review move keep|archive RUN_ID", False, "'keep'"),
        ("ade-tasks runs show", True, "Missing argument 'RUN_ID'"),
        ("ade-tasks runs show [--json]", True, "needs RUN_ID"),
        ("ade-tasks runs show a b", True, "takes RUN_ID"),
        ("ade-tasks runs", True, "needs a subcommand"),
        ("ade-tasks worker --loglevl INFO", True, "has no option --loglevl"),
    ],
)
def test_the_command_checks_can_fail(line: str, complete: bool, wanted: str) -> None:
    (invocation,) = invocations_in_line(line, "docs/x.md:3")
    invocation = Invocation(invocation.where, invocation.argv, complete)
    problems = invocation_problems(invocation)
    assert problems and wanted in problems[0], problems
    assert problems[0].startswith("docs/x.md:3: `ade-tasks"), problems


def test_the_command_checks_accept_what_the_cli_takes() -> None:
    for line in (
        "ADE_X=1 ade-tasks runs list --limit 3 --json | head",
        "sudo -u ade sh -c 'set -a; . /etc/ade/ade.env; exec /opt/ade/venv/bin/ade-tasks db upgrade'",
        "ade-tasks worker -Q ade.agent -c 1 -n agent@%h --loglevel INFO",
        "ade-tasks --version",
    ):
        (invocation,) = invocations_in_line(line, "docs/x.md:3")
        assert invocation_problems(invocation) == [], line
    prose = span_invocation("ade-tasks runs show", "docs/x.md:3", in_ade_cell=False)
    assert prose is not None and invocation_problems(prose) == []


@pytest.mark.parametrize(
    ("text", "wanted"),
    [
        (
            "id: x\ntriggers: [{type: manual}]\nexecution: {kind: built-in, actions: []}\n",
            "actions",
        ),
        ("triggers:\n  - {type: schedule, cron: '61 * * * *'}\n", "triggers.0"),
        ("- {id: a, type: run-command}\n", "command"),
        ("condition: steps.a.status ==\n", "expected a value"),
        ("guardrails: {max_duration_min: 30}\nguardrails: {}\n", "given twice"),
        ("colour: blue\n", "no rule, part of a rule"),
        ("id: [\n", "malformed YAML"),
    ],
)
def test_the_yaml_checks_can_fail(text: str, wanted: str) -> None:
    problems = yaml_block_problems(Block("docs/x.md", 7, "yaml", text))
    assert problems and wanted in " ".join(problems), problems
    assert all(p.startswith("docs/x.md:") for p in problems), problems
