"""The error tree of ADE Tasks: one root, a few kinds a caller can act on.

Each class docstring is its default message; callers pass a specific one that says
what was wrong, where, and what to do.
"""

from __future__ import annotations

from collections.abc import Iterable


class AdeError(Exception):
    """ADE Tasks failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self.args[0])


class NotFoundError(AdeError):
    """The requested object does not exist."""


class InvalidInputError(AdeError):
    """A request parameter is invalid."""


class AdmissionError(AdeError):
    """The trigger was not admitted: the rule may not run now."""

    def __init__(self, message: str | None = None, *, kind: str = "not-admitted") -> None:
        super().__init__(message)
        #: Why, as an event's matching verdict records it (`paused`, `disabled`, `untrusted`,
        #: `kill-switch`, or `not-admitted`: `ade_tasks.triggers.verdicts.Verdict`).
        self.kind = kind


class ConflictError(AdeError):
    """The object is not in a state that allows this change."""


class IllegalTransitionError(ConflictError):
    """The run or step is not in a status this change may leave (see `ade_tasks.states`)."""


class GoneError(AdeError):
    """What the request points at existed once and was removed (expired history)."""


class PolicyViolationError(AdeError):
    """A step tried to do something its rule does not allow."""


class TransientError(AdeError):
    """A temporary failure; the same call may succeed later."""


class BrokerUnavailableError(TransientError):
    """The message broker could not be reached."""


class DatabaseUnavailableError(TransientError):
    """The database could not be reached (or gave no connection in time)."""


class RuleProblem:
    """One problem in one rule file: `file:field: reason`."""

    __slots__ = ("field", "file", "reason")

    def __init__(self, file: str, field: str, reason: str) -> None:
        self.file = file
        self.field = field
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.file}:{self.field}: {self.reason}"

    def __repr__(self) -> str:
        return f"RuleProblem({self.file!r}, {self.field!r}, {self.reason!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RuleProblem) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))


def not_registered(what: str, name: str, known: Iterable[str], fix: str) -> NotFoundError:
    """The error of a registry asked for a name it does not hold: what kind of thing, the
    name, the names it knows, and what to do."""
    return NotFoundError(
        f"{name!r} is not {what} this worker knows ({', '.join(sorted(known))}); {fix}"
    )
