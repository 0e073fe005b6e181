"""How GitHub says no, in words an operator can act on: the message of an error answer, whether
a 403 is a rate limit, how long to wait, and what to do about a refusal (`GithubClient`)."""

from __future__ import annotations

import time

import httpx

from ade_tasks.retry import retry_after_seconds
from ade_workers.integrations.http import excerpt

STEP_GIVES_UP = "try again later or raise the step's retry attempts"
# A listing is GitHub polling, not a step: its own backoff tries again, and no retry setting of
# a rule is involved; what helps is GitHub being reachable and the token able to read.
POLL_GIVES_UP = (
    "polling tries again after its backoff; check that ADE_GITHUB__API_URL reaches GitHub "
    "from this host (proxy, firewall, DNS)"
)
_ADVICE = {
    403: "give the token in ADE_GITHUB__TOKEN write access to this repository",
    404: "check the repository and issue number, and that ADE_GITHUB__TOKEN can see the "
    "repository (GitHub answers 404 for private repositories it hides)",
    422: "fix the request (e.g. the branch must exist and differ from the base)",
}


def refusal_advice(status: int, method: str, *, has_token: bool) -> str:
    """What to do about GitHub refusing a `method` call with `status`."""
    if status == 403 and method == "GET":
        return "give the token in ADE_GITHUB__TOKEN read access to this repository"
    if status == 401:
        return (
            "check ADE_GITHUB__TOKEN: it is missing, expired or revoked"
            if has_token
            else "set ADE_GITHUB__TOKEN to a token with access to the repository"
        )
    return _ADVICE.get(status, "check the request and ADE_GITHUB__API_URL")


def rate_limited(response: httpx.Response) -> bool:
    """A 403 that is GitHub's (primary or secondary) rate limit, not a missing permission."""
    headers = response.headers
    return response.status_code == 403 and (
        "retry-after" in headers or headers.get("x-ratelimit-remaining") == "0"
    )


def retry_after(headers: httpx.Headers) -> float | None:
    """Retry-After, or else the wait until an exhausted rate limit resets."""
    seconds = retry_after_seconds(headers.get("retry-after"))
    if seconds is not None:
        return seconds
    if headers.get("x-ratelimit-remaining") == "0":
        try:
            return max(float(headers["x-ratelimit-reset"]) - time.time(), 0.0)
        except (KeyError, ValueError):
            return None
    return None


def github_message(response: httpx.Response) -> str:
    """GitHub's `message` (and its `errors`) from an error body, or the start of the text;
    for a refusal that names the scopes it accepts, the token's scopes and those."""
    return _body_message(response) + (
        _scope_note(response.headers) if response.status_code == 403 else ""
    )


def _body_message(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return excerpt(response.text)
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        message: str = data["message"]
        errors = data.get("errors")
        if isinstance(errors, list) and errors:
            message += f": {errors!r}"
        return excerpt(message)
    return excerpt(response.text)


def _scope_note(headers: httpx.Headers) -> str:
    accepted = headers.get("x-accepted-oauth-scopes")
    if not accepted:
        return ""
    held = headers.get("x-oauth-scopes") or "none"
    return f"; the token's scopes: {held}; this call needs one of: {accepted}"
