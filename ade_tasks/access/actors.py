"""Who did something, as runs, approvals and the audit log record it: the calling token's name,
with the name a caller gave for a token several people share in parentheses (`oncall (kim)`).

The token's name is the identity the engine can vouch for; the part in parentheses is what the
caller says and only informs. So anything that counts people (the approvals of a
`require_human` gate, the requester who may not approve) counts token names (`token_of`).
"""

from __future__ import annotations


def actor_name(token: str, by: str | None) -> str:
    """The recorded actor: the token's name, with `by` in parentheses when it adds a name."""
    return token if not by or by == token else f"{token} ({by})"


def token_of(actor: str) -> str:
    """The token's name in a recorded actor (`oncall (kim)` -> `oncall`)."""
    token, paren, _ = actor.partition(" (")
    return token if paren and actor.endswith(")") else actor
