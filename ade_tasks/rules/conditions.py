"""Step conditions: a small, safe expression language evaluated over a TemplateContext.

A hand-written tokenizer and recursive-descent parser build an immutable tree; nothing reaches
eval, exec or Python's ast, so a condition can only read context variables and compare values.

    condition  := and ('or' and)*
    and        := not ('and' not)*
    not        := 'not' not | comparison
    comparison := operand (('==' | '!=' | '<' | '<=' | '>' | '>=' | 'in' | 'contains') operand
                           | 'matches' string)?
    operand    := '(' condition ')' | '[' literals ']' | string | number | true | false | null
                | 'failure' '(' ')' | 'failed' '(' string (',' string)* ')' | name

`failure()` is true when an earlier step of the run failed or timed out (a
`continue_on_failure` step too), `failed('tests', ...)` when one of the named earlier steps
did, as GitHub Actions' `if: failure()`. A step whose condition calls either is evaluated
after an earlier failure, when it can be true, without `always_run` or `continue_on_failure`
(the rule model marks it `always_run`); the run keeps the failure as its outcome.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ade_tasks.errors import AdeError
from ade_tasks.patterns import Pattern, PatternError, SubjectTooLongError, compile_pattern
from ade_tasks.templating import (
    NAME_PATTERN,
    TemplateContext,
    TemplateError,
    TriggerFields,
    check_name,
    kind_of,
    lookup,
)

MAX_LENGTH = 1000
MAX_DEPTH = 32

_TOKEN = re.compile(
    r"(?P<space>\s+)"
    r"|(?P<number>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)"
    r"""|(?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")"""
    rf"|(?P<name>{NAME_PATTERN})"
    r"|(?P<symbol>==|!=|<=|>=|<|>|[()\[\],])",
    re.DOTALL,
)
_KEYWORDS = frozenset({"and", "or", "not", "in", "contains", "matches", "true", "false", "null"})
_CONSTANTS: dict[str, bool | None] = {"true": True, "false": False, "null": None}
_ORDERINGS: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_COMPARISONS = frozenset({"==", "!=", "in", "contains", *_ORDERINGS})
# Unknown escapes keep their backslash so regular expressions read naturally: '\d+'.
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", "'": "'", '"': '"'}


class ConditionError(AdeError):
    """A step condition is malformed or could not be evaluated."""


class _Token(NamedTuple):
    kind: str  # "name", "number", "string", "end", or the keyword or symbol itself
    text: str
    column: int


@dataclass(frozen=True, slots=True)
class Constant:
    """A literal: string, number, true, false, null, or a tuple of those (a list literal)."""

    value: object

    def evaluate(self, context: TemplateContext, where: str) -> object:  # noqa: ARG002
        """The literal itself."""
        return self.value

    def names(self) -> Iterator[str]:
        """No variables."""
        yield from ()


@dataclass(frozen=True, slots=True)
class Variable:
    """A dotted name looked up in the context: trigger.x, steps.<id>.status, rule.name."""

    name: str

    def evaluate(self, context: TemplateContext, where: str) -> object:
        """The variable's value; ConditionError if it does not exist."""
        try:
            return lookup(self.name, context, where)
        except TemplateError as exc:
            raise ConditionError(exc.message) from exc

    def names(self) -> Iterator[str]:
        """This variable's name."""
        yield self.name


@dataclass(frozen=True, slots=True)
class Not:
    """`not operand`."""

    operand: Node

    def evaluate(self, context: TemplateContext, where: str) -> bool:
        """The negated truthiness of the operand."""
        return not self.operand.evaluate(context, where)

    def names(self) -> Iterator[str]:
        """The operand's variables."""
        return self.operand.names()


@dataclass(frozen=True, slots=True)
class And:
    """`a and b and ...`, short-circuiting so a guard can protect a later lookup."""

    operands: tuple[Node, ...]

    def evaluate(self, context: TemplateContext, where: str) -> bool:
        """True when every operand is truthy."""
        return all(operand.evaluate(context, where) for operand in self.operands)

    def names(self) -> Iterator[str]:
        """The operands' variables."""
        for operand in self.operands:
            yield from operand.names()


@dataclass(frozen=True, slots=True)
class Or:
    """`a or b or ...`, short-circuiting."""

    operands: tuple[Node, ...]

    def evaluate(self, context: TemplateContext, where: str) -> bool:
        """True when any operand is truthy."""
        return any(operand.evaluate(context, where) for operand in self.operands)

    def names(self) -> Iterator[str]:
        """The operands' variables."""
        for operand in self.operands:
            yield from operand.names()


@dataclass(frozen=True, slots=True)
class Comparison:
    """`left <op> right` for ==, !=, <, <=, >, >=, in and contains."""

    op: str
    left: Node
    right: Node
    column: int

    def evaluate(self, context: TemplateContext, where: str) -> bool:
        """The comparison; ConditionError when the operand types do not fit the operator."""
        left: Any = self.left.evaluate(context, where)
        right: Any = self.right.evaluate(context, where)
        kinds = (kind_of(left), kind_of(right))
        if self.op in ("==", "!="):
            if kinds[0] != kinds[1] and "null" not in kinds:
                raise self._type_error(where, f"cannot compare {kinds[0]} with {kinds[1]}")
            return _equal(left, right) == (self.op == "==")
        if self.op in _ORDERINGS:
            if kinds not in (("number", "number"), ("string", "string")):
                raise self._type_error(where, f"cannot order {kinds[0]} and {kinds[1]}")
            return _ORDERINGS[self.op](left, right)
        # `x in y` is `y contains x`; null contains nothing, as a null GitHub body has no text.
        container, item = (right, left) if self.op == "in" else (left, right)
        ckind, ikind = (kinds[1], kinds[0]) if self.op == "in" else kinds
        if ckind == "null":
            return False
        if ckind == "list":
            return any(_equal(element, item) for element in container)
        if ckind not in ("string", "object"):
            side = "right" if self.op == "in" else "left"
            raise self._type_error(
                where, f"needs a list, string or object on the {side}, got {ckind}"
            )
        if ikind != "string":
            article = "an" if ckind == "object" else "a"
            reason = f"can only look for a string in {article} {ckind}, got {ikind}"
            raise self._type_error(where, reason)
        return item in container

    def names(self) -> Iterator[str]:
        """Both sides' variables."""
        yield from self.left.names()
        yield from self.right.names()

    def _type_error(self, where: str, reason: str) -> ConditionError:
        return ConditionError(f"{where}: {self.op!r} at column {self.column} {reason}")


@dataclass(frozen=True, slots=True)
class Match:
    """`left matches 'regex'`: the pattern is found anywhere in the string, searched by RE2
    (`ade_tasks.patterns`: linear time, so a step output cannot stall the worker)."""

    left: Node
    pattern: Pattern
    column: int

    def evaluate(self, context: TemplateContext, where: str) -> bool:
        """Whether the pattern occurs in the left string; null matches nothing."""
        value = self.left.evaluate(context, where)
        if value is None:
            return False
        if not isinstance(value, str):
            raise ConditionError(
                f"{where}: 'matches' at column {self.column} needs a string on the left, "
                f"got {kind_of(value)}"
            )
        try:
            return self.pattern.search(value)
        except SubjectTooLongError as exc:
            raise ConditionError(
                f"{where}: 'matches' at column {self.column} cannot search its left side: "
                f"{exc.message}"
            ) from None

    def names(self) -> Iterator[str]:
        """The left side's variables."""
        return self.left.names()


#: The step statuses `failure()` and `failed(...)` count as a failure.
FAILED_STATUSES = frozenset({"failed", "timed_out"})
#: The condition functions: name -> whether it takes step ids.
FUNCTIONS = {"failure": False, "failed": True}


@dataclass(frozen=True, slots=True)
class Failure:
    """`failure()`: did an earlier step fail? `failed('a', 'b')`: did step a or b?"""

    step_ids: tuple[str, ...]

    def evaluate(self, context: TemplateContext, where: str) -> bool:
        """Whether a counted step ended failed or timed out."""
        if not self.step_ids:
            return any(step.get("status") in FAILED_STATUSES for step in context.steps.values())
        return any(
            Variable(f"steps.{step_id}.status").evaluate(context, where) in FAILED_STATUSES
            for step_id in self.step_ids
        )

    def names(self) -> Iterator[str]:
        """The status of each named step, so the load-time check finds unknown steps."""
        for step_id in self.step_ids:
            yield f"steps.{step_id}.status"


Node = Constant | Variable | Not | And | Or | Comparison | Match | Failure


@dataclass(frozen=True, slots=True)
class Condition:
    """A parsed step condition: its text, where it came from, and its expression tree."""

    text: str
    where: str
    node: Node
    asks_about_failure: bool = False  # calls failure() or failed(...)

    def names(self) -> list[str]:
        """The variable names the condition reads, each once, in order of first use."""
        return list(dict.fromkeys(self.node.names()))

    def evaluate(self, context: TemplateContext) -> bool:
        """Whether the condition holds; ConditionError on unknown variables or type mismatches."""
        return bool(self.node.evaluate(context, self.where))


def parse_condition(text: str, where: str) -> Condition:
    """Parse `text`; ConditionError says what was expected and at which column."""
    if len(text) > MAX_LENGTH:
        raise ConditionError(
            f"{where}: condition is {len(text)} characters long, the limit is {MAX_LENGTH}; "
            "shorten it or split the step"
        )
    parser = _Parser(text, where)
    node = parser.parse()
    return Condition(text, where, node, parser.asks_about_failure)


def asks_about_failure(text: str) -> bool:
    """Does the condition call failure() or failed(...)? False when it does not parse (the
    load-time check reports that)."""
    try:
        return parse_condition(text, "condition").asks_about_failure
    except ConditionError:
        return False


def check_condition(
    text: str,
    *,
    earlier_steps: Sequence[str],
    where: str,
    trigger_fields: TriggerFields | None = None,
) -> list[str]:
    """Load-time problems of a condition: syntax, then the same name checks as templates."""
    try:
        condition = parse_condition(text, where)
    except ConditionError as exc:
        return [exc.message]
    return [
        problem
        for name in condition.names()
        for problem in check_name(name, earlier_steps, where, trigger_fields)
    ]


class _Parser:
    def __init__(self, text: str, where: str) -> None:
        self._text = text
        self._where = where
        self._tokens = _tokenize(text)
        self._position = 0
        self._depth = 0
        self.asks_about_failure = False

    def parse(self) -> Node:
        node = self._or()
        if self._peek().kind != "end":
            raise self._error("expected 'and', 'or' or the end of the condition")
        return node

    def _or(self) -> Node:
        operands = [self._and()]
        while self._accept("or"):
            operands.append(self._and())
        return operands[0] if len(operands) == 1 else Or(tuple(operands))

    def _and(self) -> Node:
        operands = [self._not()]
        while self._accept("and"):
            operands.append(self._not())
        return operands[0] if len(operands) == 1 else And(tuple(operands))

    def _not(self) -> Node:
        if not self._accept("not"):
            return self._comparison()
        self._enter()
        node = Not(self._not())
        self._depth -= 1
        return node

    def _comparison(self) -> Node:
        left = self._operand()
        token = self._peek()
        if self._accept("matches"):
            pattern = self._peek()
            if not self._accept("string"):
                raise self._error("expected a quoted regular expression after 'matches'")
            try:
                compiled = compile_pattern(_unquote(pattern.text))
            except PatternError as exc:
                raise self._error(f"invalid regular expression ({exc.message})", pattern) from None
            return Match(left, compiled, token.column)
        if token.kind in _COMPARISONS:
            self._position += 1
            return Comparison(token.kind, left, self._operand(), token.column)
        return left

    def _operand(self) -> Node:
        token = self._peek()
        if self._accept("("):
            self._enter()
            node = self._or()
            self._depth -= 1
            if not self._accept(")"):
                raise self._error(f"expected ')' (opened at column {token.column})")
            return node
        if self._accept("["):
            return Constant(self._list())
        if self._accept("name"):
            if token.text in FUNCTIONS and self._peek().kind == "(":
                return self._failure(token)
            return Variable(token.text)
        constant = self._constant()
        if constant is None:
            raise self._error("expected a value")
        return constant

    def _failure(self, name: _Token) -> Failure:
        self._accept("(")
        step_ids: list[str] = []
        while FUNCTIONS[name.text] and (step := self._peek()).kind == "string":
            self._position += 1
            step_ids.append(_unquote(step.text))
            if not self._accept(","):
                break
        if not self._accept(")"):
            expected = "a quoted step id or ')'" if FUNCTIONS[name.text] else "')'"
            usage = "failed('<step id>', ...)" if FUNCTIONS[name.text] else "failure()"
            raise self._error(f"expected {expected} in {name.text}(...)", advice=f"write {usage}")
        if FUNCTIONS[name.text] and not step_ids:
            raise self._error(
                "failed() needs the steps it asks about", name, "write failed('<step id>', ...)"
            )
        self.asks_about_failure = True
        return Failure(tuple(step_ids))

    def _list(self) -> tuple[object, ...]:
        items: list[object] = []
        while not self._accept("]"):
            item = self._constant()
            if item is None:
                raise self._error("expected a string, number, true, false, null or ']' in the list")
            items.append(item.value)
            if not self._accept(",") and self._peek().kind != "]":
                raise self._error("expected ',' or ']' in the list")
        return tuple(items)

    def _constant(self) -> Constant | None:
        token = self._peek()
        if self._accept("string"):
            return Constant(_unquote(token.text))
        if self._accept("number"):
            is_float = any(mark in token.text for mark in ".eE")
            return Constant(float(token.text) if is_float else int(token.text))
        if token.kind in _CONSTANTS:
            self._position += 1
            return Constant(_CONSTANTS[token.kind])
        return None

    def _enter(self) -> None:
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise self._error(
                f"nesting deeper than {MAX_DEPTH} levels", advice="simplify the condition"
            )

    def _peek(self) -> _Token:
        token = self._tokens[self._position]
        if token.kind == "invalid":
            raise self._error(token.text, token)
        return token

    def _accept(self, kind: str) -> bool:
        if self._peek().kind != kind:
            return False
        self._position += 1
        return True

    def _error(
        self, expected: str, token: _Token | None = None, advice: str = ""
    ) -> ConditionError:
        column = (token or self._peek()).column
        message = f'{self._where}: {expected} at column {column} in "{self._text}"'
        return ConditionError(message + (f"; {advice}" if advice else ""))


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            # Reported only when the parser reaches it, so errors come in reading order.
            quote = text[position] in "'\""
            problem = "unterminated string" if quote else f"unexpected character {text[position]!r}"
            tokens.append(_Token("invalid", problem, position + 1))
            return tokens
        kind = match.lastgroup or ""
        if kind != "space":
            word = match.group()
            if kind == "symbol" or (kind == "name" and word in _KEYWORDS):
                kind = word
            tokens.append(_Token(kind, word, position + 1))
        position = match.end()
    tokens.append(_Token("end", "", len(text) + 1))
    return tokens


def _unquote(token: str) -> str:
    return _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(1), m.group()), token[1:-1])


def _equal(left: Any, right: Any) -> bool:
    # Kinds first, so true is not 1; lists element by element, so a literal tuple equals a list.
    if kind_of(left) != kind_of(right):
        return False
    if kind_of(left) == "list":
        return len(left) == len(right) and all(map(_equal, left, right))
    return bool(left == right)
