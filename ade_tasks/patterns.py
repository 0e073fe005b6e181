"""Regular expressions written by rule authors, matched by RE2 in time linear in the text.

Rule authors write regexes in trigger filters (`title_regex`, `body_regex`), custom hooks'
`matches` filters and step conditions (`x matches '...'`), and path globs become regexes too.
Those patterns meet text anyone can send (a pull request's title, a branch name), and Python's
backtracking `re` can take exponential time on it: `(a+)+$` against 36 `a`s and a `!` keeps a
worker at 100 % CPU for hours. RE2 (google-re2) never backtracks, so every pattern here runs in
time proportional to (program size x text length).

What RE2 cannot express is refused when the rule or hook is validated, with what to write
instead (`PatternError`, a ValueError so pydantic reports it under the field): backreferences
(`\\1`, `(?P=name)`), lookahead and lookbehind, atomic groups and possessive quantifiers, `\\Z`
(RE2 writes `\\z`), the verbose flag `(?x)`, counted repetitions above 1000. Syntax that RE2
reads differently from Python is accepted as RE2 reads it: `\\d`, `\\w`, `\\s` and `\\b` are
ASCII-only (use `\\pL`, `\\pN` for Unicode), and `$` matches only at the very end of the text
(Python's also matches before a final newline).

Two bounds keep one search cheap however hostile the text, so the callers' time bounds (the
ingress dispatcher's deadline per event) hold between searches: a compiled program is at most
`MAX_PROGRAM_SIZE` RE2 instructions (refused at validation), and a search looks at most at
`MAX_SUBJECT_CHARS` characters (`SubjectTooLongError`). At both bounds a search takes about a
second on a 2-core machine; typical patterns take microseconds.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import re2

from ade_tasks.errors import AdeError

#: A pattern's text and compiled size: `(\w+\s?){300}$` is 3,004 instructions, a 500-word
#: alternation ~110; the product with the text length bounds a search's time.
MAX_PATTERN_CHARS = 4096
MAX_PROGRAM_SIZE = 2000
#: Twice GitHub's cap on a pull request, issue or comment body (65,536 characters).
MAX_SUBJECT_CHARS = 131_072
SYNTAX_URL = "https://github.com/google/re2/wiki/Syntax"

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # errors become PatternError; RE2 would also print them to stderr


class PatternError(AdeError, ValueError):
    """The regular expression cannot be used."""


class SubjectTooLongError(AdeError):
    """The text is too long to be searched with a rule's regular expression."""


@dataclass(frozen=True)
class Pattern:
    """A compiled rule regex: its source text and the RE2 program (compared by source)."""

    source: str
    _program: Any = field(compare=False, repr=False)

    def search(self, text: str, *, limit: int = MAX_SUBJECT_CHARS) -> bool:
        """Whether the pattern occurs anywhere in `text` (like `re.search`).

        SubjectTooLongError when `text` is longer than `limit` characters: a search is only
        bounded in time when its text is, and matching a prefix would quietly answer a
        different question than the rule asked.
        """
        _check_length(text, limit)
        return self._program.search(text) is not None

    def fullmatch(self, text: str, *, limit: int = MAX_SUBJECT_CHARS) -> bool:
        """Whether the pattern matches the whole of `text` (like `re.fullmatch`)."""
        _check_length(text, limit)
        return self._program.fullmatch(text) is not None


def compile_pattern(source: str, *, max_program: int | None = MAX_PROGRAM_SIZE) -> Pattern:
    """Compile `source` with RE2; PatternError says what RE2 cannot express and what to write
    instead. Cached: rules are re-validated for every event they are matched against."""
    return _compile(source, max_program)


def check_pattern(source: str) -> str:
    """`source` unchanged if it compiles (a pydantic validator); PatternError otherwise."""
    compile_pattern(source)
    return source


def escape(text: str) -> str:
    """`text` as a pattern that matches it literally."""
    return str(re2.escape(text))


@functools.lru_cache(maxsize=1024)
def _compile(source: str, max_program: int | None) -> Pattern:
    if len(source) > MAX_PATTERN_CHARS:
        raise PatternError(
            f"the regular expression is {len(source):,} characters long, the limit is "
            f"{MAX_PATTERN_CHARS:,}: shorten it or split it over several filters"
        )
    try:
        program = re2.compile(source, _OPTIONS)
    except re2.error as exc:
        raise PatternError(_explain(source, _reason(exc))) from None
    if max_program is not None and program.programsize > max_program:
        raise PatternError(
            f"{_shown(source)} is too complex for a rule regex: it compiles to "
            f"{program.programsize:,} RE2 instructions, the limit is {max_program:,} (the "
            "time a search may take grows with it); use fewer or smaller counted repetitions "
            "({n}) or split it over several filters"
        )
    return Pattern(source, program)


def _check_length(text: str, limit: int) -> None:
    if len(text) > limit:
        raise SubjectTooLongError(
            f"the text is {len(text):,} characters long; a rule regex searches at most "
            f"{limit:,}, so a search can never stall a worker"
        )


def _reason(exc: BaseException) -> str:
    detail = exc.args[0] if exc.args else exc
    return detail.decode(errors="replace") if isinstance(detail, bytes) else str(detail)


# RE2's parser error (a prefix of it) -> what the pattern used that RE2 cannot express, and
# what to write instead. RE2 has no backtracking, so these features have no linear-time form.
_UNSUPPORTED = (
    (
        "invalid perl operator: (?=",
        "lookahead (?=...)",
        "match the text itself, e.g. `foo(bar)` for `foo(?=bar)`, or use a second filter",
    ),
    (
        "invalid perl operator: (?!",
        "negative lookahead (?!...)",
        "list what may follow instead, or exclude the case with a second filter or condition",
    ),
    (
        "invalid perl operator: (?<",
        "lookbehind (?<=...) / (?<!...)",
        "match the preceding text too, e.g. `@(ade)` for `(?<=@)ade`, or use a second filter",
    ),
    (
        "invalid perl operator: (?>",
        "an atomic group (?>...)",
        "drop the `?>`: RE2 never backtracks, so the plain group behaves the same",
    ),
    (
        "invalid perl operator: (?#",
        "an inline comment (?#...)",
        "remove the comment",
    ),
    (
        "invalid perl operator: (?x",
        "the verbose flag (?x)",
        "remove the whitespace and comments; RE2 supports the flags i, m, s and U",
    ),
    (
        "bad repetition operator: ",
        "a possessive quantifier (*+, ++, ?+)",
        "write the plain quantifier (`a+` for `a++`): RE2 never backtracks",
    ),
    (
        "invalid repetition size",
        "a counted repetition above {1000}",
        "use + or *, or a smaller count",
    ),
    (
        "invalid escape sequence: \\Z",
        "\\Z",
        "write \\z for the end of the text",
    ),
    (
        "invalid perl operator: (?",
        "a group or flag RE2 does not know",
        "RE2 has (?:...), (?P<name>...) and the flags i, m, s and U",
    ),
)


def _explain(source: str, reason: str) -> str:
    backreference = reason.startswith("invalid escape sequence: \\") and reason[-1:].isdigit()
    if backreference or (reason.startswith("invalid perl operator: (?P") and "(?P=" in source):
        return _unsupported(
            source,
            f"a backreference ({reason.rsplit(' ', 1)[-1] if backreference else '(?P=name)'})",
            "RE2 cannot match a group's text again; spell the repeated text out",
        )
    for prefix, feature, advice in _UNSUPPORTED:
        if reason.startswith(prefix):
            return _unsupported(source, feature, advice)
    return f"{_shown(source)} is not a valid regular expression for RE2 ({reason}; {SYNTAX_URL})"


def _unsupported(source: str, feature: str, advice: str) -> str:
    return (
        f"{_shown(source)} uses {feature}, which RE2 cannot express: {advice}. Rule regexes "
        f"run on RE2 so that matching takes linear time ({SYNTAX_URL})"
    )


def _shown(source: str) -> str:
    return repr(source) if len(source) <= 80 else repr(source[:77]) + "..."
