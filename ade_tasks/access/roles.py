"""The roles an API token can have, apart from the tables so the CLI can name them without
loading SQLAlchemy (half of a command's start-up time)."""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    """What an API token may do (wire values); each role may do what the ones below it may.

    `viewer` reads everything but secrets; `operator` also triggers, cancels, retries, answers
    inputs and moves runs in the review queue; `admin` also manages rules, trust and tokens.
    """

    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return list(Role).index(self)
