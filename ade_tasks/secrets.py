"""Secrets for rule steps: `${env:NAME}` resolved on the worker, and their values masked in output.

A rule names a secret, never holds it: `${env:SLACK_WEBHOOK_URL}` inside a step's fields is
replaced at execution time by the worker's environment variable, so the value lives only on the
workers. Every value used is then masked (`***`) wherever output goes: captured command output,
step results, run events, API responses.

References are resolved in string values only, never in mapping keys, and there is no escape
syntax. A resolved value is not scanned again, so a secret containing `${env:X}` stays as it is.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TypeVar, cast
from urllib.parse import quote, quote_plus

from ade_tasks.errors import AdeError

MASK = "***"
_OPENING = "${env:"
_T = TypeVar("_T")  # a value and its copy with strings changed have one shape
_REFERENCE = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")


class SecretError(AdeError):
    """A step needs a secret that is not set in the worker's environment."""

    def __init__(self, message: str | None = None, names: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.names = tuple(names)


def references(value: object) -> list[str]:
    """The names of all well-formed `${env:NAME}` references in `value`, once each, in order."""
    found: dict[str, None] = {}  # a dict keeps the first-seen order
    for _, text, is_key in _strings(value, ""):
        if not is_key:
            found.update((m.group(1), None) for m in _REFERENCE.finditer(text))
    return list(found)


def check(value: object, where: str) -> list[str]:
    """Load-time problems with the references in `value`, each as `where.path: reason`."""
    problems: list[str] = []
    for path, text, is_key in _strings(value, where):
        start = text.find(_OPENING)
        while start != -1:
            if is_key:
                problems.append(
                    f"{path}: secret references are resolved in values only, not in keys; "
                    f"move {_OPENING}...}} into the value"
                )
                break
            if not _REFERENCE.match(text, start):
                end = text.find("}", start)
                bad = text[start : end + 1] if end != -1 else text[start : start + 30]
                problems.append(
                    f"{path}: malformed secret reference {bad!r}; write ${{env:NAME}} where NAME "
                    "is letters, digits and underscores and does not start with a digit"
                )
            start = text.find(_OPENING, start + 1)
    return problems


def resolve(value: _T, env: Mapping[str, str], where: str) -> tuple[_T, Masker]:
    """A deep copy of `value` with every reference replaced, and a Masker for the values used."""
    names = references(value)
    missing = [name for name in names if name not in env]
    if missing:
        listed = ", ".join(f"${{env:{name}}}" for name in missing)
        noun, pronoun = ("secret", "it") if len(missing) == 1 else ("secrets", "them")
        raise SecretError(
            f"{where} needs {noun} {listed}, which {'is' if len(missing) == 1 else 'are'} not "
            f"set in the worker's environment; set {pronoun} on every worker that runs this "
            "rule, then run it again",
            missing,
        )
    used = {name: env[name] for name in names}
    return _substitute(value, used), Masker(used.values())


class Masker:
    """Replaces secret values, and the forms they take in JSON, reprs and URLs, with `***`.

    Every non-blank value is masked whatever its length, as GitHub Actions does: the masker cannot
    tell a weak secret from a harmless word, and a leak cannot be undone while mangled output is
    visible and fixable. So a 1-3 character value mangles output (a secret "1" turns every 1 into
    `***`): settings that are not secrets belong in a step's literal `env`, not in `${env:...}`.
    Where occurrences overlap, the whole overlapping stretch becomes one `***`, so no fragment of
    either secret survives; adjacent occurrences give one `***` each.
    """

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._values = frozenset(value for value in values if value.strip())
        forms = sorted(
            {f for value in self._values for f in _forms(value)}, key=lambda f: (-len(f), f)
        )
        # Alternatives are tried in order, so at each position the longest form wins.
        self._pattern = re.compile("|".join(map(re.escape, forms))) if forms else None
        self.longest = len(forms[0]) if forms else 0
        self._by_first: dict[str, list[str]] = {}
        for form in forms:
            self._by_first.setdefault(form[0], []).append(form)

    @classmethod
    def none(cls) -> Masker:
        """A masker that masks nothing."""
        return cls()

    def with_values(self, values: Iterable[str]) -> Masker:
        """A masker for these values and this masker's."""
        return Masker([*self._values, *values])

    def merge(self, other: Masker) -> Masker:
        """A masker for the values of both maskers."""
        return self.with_values(other._values)

    def __bool__(self) -> bool:
        return self._pattern is not None

    def mask(self, text: str) -> str:
        """`text` with every secret replaced by `***`."""
        return self._scan(text, 0, final=True)[0]

    def mask_value(self, value: _T) -> _T:
        """A copy of `value` with every string inside its dicts, lists and tuples masked."""
        masked: object
        if isinstance(value, str):
            masked = self.mask(value)
        elif isinstance(value, dict):
            masked = {self.mask_value(k): self.mask_value(v) for k, v in value.items()}
        elif isinstance(value, list):
            masked = [self.mask_value(item) for item in value]
        elif isinstance(value, tuple):
            masked = tuple(self.mask_value(item) for item in value)
        else:
            return value
        return cast(_T, masked)  # the same shape: a string for each string

    def _scan(self, text: str, covered: int, final: bool) -> tuple[str, str, int]:
        """Mask what `text` decides: (output, undecided rest, length of the rest already masked).

        A match starting at `i` is decided once `text` holds `i + longest` characters; `covered`
        leading characters belong to a `***` already emitted, kept only to find overlaps.
        """
        if self._pattern is None:
            return text, "", 0
        limit = len(text) if final else self._undecided_from(text)
        out: list[str] = []
        end = covered
        match = self._pattern.search(text)
        while match and match.start() < limit:
            if match.start() >= end:
                out += (text[end : match.start()], MASK)
            end = max(end, match.end())
            match = self._pattern.search(text, match.start() + 1)
        if end < limit:
            out.append(text[end:limit])
            end = limit
        return "".join(out), text[limit:], end - limit

    def _undecided_from(self, text: str) -> int:
        """Where the part of `text` starts that more text could still turn into a secret: the
        first of its last `longest - 1` positions from which the rest is the beginning of a
        secret's form. Only that is held back, so output that pauses is shown up to its end
        unless it ends in what may be the start of a secret."""
        for start in range(max(0, len(text) - self.longest + 1), len(text)):
            rest = text[start:]
            forms = self._by_first.get(rest[0], ())
            if any(len(form) > len(rest) and form.startswith(rest) for form in forms):
                return start
        return len(text)


class StreamMasker:
    """Masks text arriving in chunks; the emitted pieces join to `masker.mask(whole text)`."""

    def __init__(self, masker: Masker) -> None:
        self._masker = masker
        self._pending = ""
        self._covered = 0

    def feed(self, chunk: str) -> str:
        """The masked text that is safe to emit, holding back at most `longest - 1` characters."""
        out, self._pending, self._covered = self._masker._scan(
            self._pending + chunk, self._covered, final=False
        )
        return out

    def flush(self) -> str:
        """The rest of the stream, masked."""
        out, _, _ = self._masker._scan(self._pending, self._covered, final=True)
        self._pending, self._covered = "", 0
        return out


def _forms(secret: str) -> set[str]:
    return {
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(secret)[1:-1],
        repr(secret + "'\"")[1:-4],  # inside a repr that had to escape single quotes
        quote(secret, safe=""),
        quote_plus(secret, safe=""),
    }


def _strings(value: object, path: str) -> Iterator[tuple[str, str, bool]]:
    """(path, text, is_key) for every string inside `value`."""
    if isinstance(value, str):
        yield path, value, False
    elif isinstance(value, dict):
        for key, item in value.items():
            inner = f"{path}.{key}" if path else str(key)
            if isinstance(key, str):
                yield inner, key, True
            yield from _strings(item, inner)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _strings(item, f"{path}[{index}]")


def _substitute(value: _T, used: Mapping[str, str]) -> _T:
    return _map_strings(value, lambda text: _REFERENCE.sub(lambda m: used[m.group(1)], text))


def _map_strings(value: _T, change: Callable[[str], str]) -> _T:
    """A deep copy of `value` with `change` applied to every string value (keys untouched)."""
    changed: object
    if isinstance(value, str):
        changed = change(value)
    elif isinstance(value, dict):
        changed = {key: _map_strings(item, change) for key, item in value.items()}
    elif isinstance(value, list):
        changed = [_map_strings(item, change) for item in value]
    elif isinstance(value, tuple):
        changed = tuple(_map_strings(item, change) for item in value)
    else:
        return copy.deepcopy(value)
    return cast(_T, changed)  # the same shape: a string for each string


#: Seals stand in for secret references while templates are rendered; NUL never appears in a
#: rule's YAML text, and template values have it stripped (see `unsealable`).
_SEAL = "\x00"


def seal(value: _T) -> tuple[_T, dict[str, str]]:
    """`value` with each `${env:NAME}` replaced by an opaque seal, and seal -> NAME.

    Rendering templates over sealed text can neither read a secret (a secret's value that
    looks like `{{...}}` is never rendered) nor create one (a trigger field that holds
    `${env:...}` is never resolved); `unseal` puts the values in afterwards.
    """
    seals: dict[str, str] = {}

    def seal_one(match: re.Match[str]) -> str:
        token = f"{_SEAL}{len(seals)}{_SEAL}"
        seals[token] = match.group(1)
        return token

    return _map_strings(value, lambda text: _REFERENCE.sub(seal_one, text)), seals


def unseal(value: _T, seals: Mapping[str, str], env: Mapping[str, str]) -> _T:
    """Replace the seals of `seal` with the secrets' values."""
    if not seals:
        return value
    pattern = re.compile("|".join(re.escape(token) for token in seals))
    return _map_strings(value, lambda text: pattern.sub(lambda m: env[seals[m.group(0)]], text))


def unsealable(text: str) -> str:
    """A value inserted between seals, made unable to forge one."""
    return text.replace(_SEAL, "")
