"""GitHub REST side effects of a run: comments, labels and draft pull requests, each idempotent;
and the read-only listings GitHub polling uses (`ade_tasks.ingress.poller`).

Every write carries a hidden marker (`<!-- ade:run=... step=... -->`) or is keyed by its branch,
so a retried call, or a retried run, finds its earlier effect and updates it instead of adding
a second one. Each public method is retried as a whole under a `RetryPolicy`: a POST whose
answer was lost is found again by the listing that starts the next attempt.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

import httpx

from ade_tasks.errors import InvalidInputError
from ade_tasks.json_document import JsonObject
from ade_tasks.retry import RetryPolicy, retry_after_seconds
from ade_tasks.settings import GithubSettings
from ade_workers.integrations.http import IntegrationClient, IntegrationError, excerpt

T = TypeVar("T")

DEFAULT_POLICY = RetryPolicy(attempts=3)
API_VERSION = "2022-11-28"
_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
# 100 pages of 100 comments: far beyond any real issue, but a loop bound all the same.
_MAX_PAGES = 100
# A listing stops after this many items (100 full pages), so it never asks for page 101.
_MAX_ITEMS = _MAX_PAGES * 100
_GIVE_UP = "try again later or raise the step's retry attempts"
_ADVICE = {
    403: "give the token in ADE_GITHUB__TOKEN write access to this repository",
    404: "check the repository and issue number, and that ADE_GITHUB__TOKEN can see the "
    "repository (GitHub answers 404 for private repositories it hides)",
    422: "fix the request (e.g. the branch must exist and differ from the base)",
}


@dataclass(frozen=True)
class Comment:
    """An issue or pull-request comment written by ADE."""

    id: int
    url: str
    created: bool


@dataclass(frozen=True)
class PullRequest:
    """A pull request opened or updated by ADE."""

    number: int
    url: str
    created: bool


def marker_line(marker: str) -> str:
    """The hidden HTML comment that identifies ADE's comment or PR body for `marker`."""
    if not marker.strip() or "\n" in marker or "\r" in marker or "-->" in marker:
        raise InvalidInputError(
            f"marker {marker!r} must be one non-empty line without '-->' "
            "(e.g. 'run=<run_id> step=<step_id>')"
        )
    return f"<!-- ade:{marker} -->"


def with_marker(body: str, marker: str) -> str:
    """`body` followed by its marker line (a body already carrying it is left alone)."""
    line = marker_line(marker)
    if has_marker(body, line):
        return body
    return f"{body.rstrip()}\n\n{line}"


def has_marker(body: str | None, line: str) -> bool:
    """True when `line` stands on a line of its own in `body` (a quoted copy, "> <!-- ...", does
    not count)."""
    return any(part.strip() == line for part in (body or "").splitlines())


class GithubClient:
    """A synchronous GitHub REST client (github.com or Enterprise) with idempotent writes."""

    def __init__(
        self,
        *,
        base_url: str = "https://api.github.com",
        token: str | None = None,
        timeout: float = 10.0,
        policy: RetryPolicy = DEFAULT_POLICY,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._token = token or None
        headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": API_VERSION}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        self._http = IntegrationClient(
            "GitHub",
            base_url,
            url_fix="check ADE_GITHUB__API_URL",
            timeout=timeout,
            policy=policy,
            headers=headers,
            secrets=[self._token],
            # GitHub answers renamed repositories with 301/307; httpx drops Authorization when a
            # redirect leaves the origin.
            follow_redirects=True,
            explain=_github_message,
            retry_after=_retry_after,
            rate_limited=_rate_limited,
            transport=transport,
            sleep=sleep,
        )

    @classmethod
    def from_settings(
        cls,
        settings: GithubSettings,
        *,
        policy: RetryPolicy = DEFAULT_POLICY,
        timeout: float = 10.0,
    ) -> GithubClient:
        """A client for the configured GitHub (ADE_GITHUB__API_URL, ADE_GITHUB__TOKEN)."""
        token = settings.token.get_secret_value() if settings.token is not None else None
        return cls(base_url=settings.api_url, token=token, timeout=timeout, policy=policy)

    def __repr__(self) -> str:
        where = self._http.where
        return f"GithubClient(base_url={where!r}, token={'***' if self._token else None})"

    def __enter__(self) -> GithubClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the pooled connections."""
        self._http.close()

    # -- public operations ----------------------------------------------------------------------

    def upsert_comment(
        self, repo: str, number: int, body: str, marker: str, *, deadline: float | None = None
    ) -> Comment:
        """Update the comment on issue/PR `number` that carries `marker`, or post a new one."""
        base = f"/repos/{_check_repo(repo)}/issues/{_check_number(number)}"
        text = with_marker(body, marker)
        line = marker_line(marker)

        def attempt() -> Comment:
            existing = self._find_comment(f"{base}/comments", line, deadline)
            method, path = (
                ("POST", f"{base}/comments")
                if existing is None
                else ("PATCH", f"/repos/{repo}/issues/comments/{existing}")
            )
            data = self._request(method, path, deadline, json={"body": text})
            return Comment(
                self._field(data, "id", int, method, path),
                self._field(data, "html_url", str, method, path),
                created=existing is None,
            )

        return self._retrying(f"upsert a comment on {repo}#{number}", attempt, deadline)

    def add_labels(
        self, repo: str, number: int, labels: list[str], *, deadline: float | None = None
    ) -> list[str]:
        """Add `labels` to issue/PR `number`; returns every label it now has."""
        path = f"/repos/{_check_repo(repo)}/issues/{_check_number(number)}/labels"
        wanted = list(dict.fromkeys(labels))

        def attempt() -> list[str]:
            data = self._request("POST", path, deadline, json={"labels": wanted})
            if not isinstance(data, list):
                raise self._unexpected("POST", path, "a list of labels")
            return [self._field(item, "name", str, "POST", path) for item in data]

        return self._retrying(f"add labels to {repo}#{number}", attempt, deadline)

    def open_draft_pr(
        self,
        repo: str,
        head: str,
        base: str,
        title: str,
        body: str,
        marker: str,
        *,
        deadline: float | None = None,
    ) -> PullRequest:
        """Update the open PR from branch `head`, or open a draft PR from `head` into `base`."""
        owner = _check_repo(repo).split("/", 1)[0]
        if not head or not base:
            raise InvalidInputError(f"a pull request on {repo} needs head and base branches")
        # "other-owner:branch" names a fork's branch; a bare branch lives in `repo` itself.
        qualified_head = head if ":" in head else f"{owner}:{head}"
        text = with_marker(body, marker)
        pulls = f"/repos/{repo}/pulls"

        def attempt() -> PullRequest:
            found = self._request(
                "GET", pulls, deadline, params={"head": qualified_head, "state": "open"}
            )
            if not isinstance(found, list):
                raise self._unexpected("GET", pulls, "a list of pull requests")
            if found:
                number = self._field(found[0], "number", int, "GET", pulls)
                path = f"{pulls}/{number}"
                data = self._request(
                    "PATCH", path, deadline, json={"title": title, "body": text, "base": base}
                )
                return PullRequest(number, self._field(data, "html_url", str, "PATCH", path), False)
            data = self._request(
                "POST",
                pulls,
                deadline,
                json={"title": title, "head": head, "base": base, "body": text, "draft": True},
            )
            return PullRequest(
                self._field(data, "number", int, "POST", pulls),
                self._field(data, "html_url", str, "POST", pulls),
                created=True,
            )

        return self._retrying(f"open a draft PR on {repo} from {head}", attempt, deadline)

    # -- listings (GitHub polling) --------------------------------------------------------------

    def list_issues(
        self, repo: str, since: datetime, *, limit: int = _MAX_ITEMS, deadline: float | None = None
    ) -> list[JsonObject]:
        """Issues and pull requests of `repo` (any state) updated at or after `since`, least
        recently updated first; at most `limit` (a later `since` lists the rest)."""
        return self._listing(repo, "issues", "issues", since, limit, deadline, {"state": "all"})

    def list_issue_comments(
        self, repo: str, since: datetime, *, limit: int = _MAX_ITEMS, deadline: float | None = None
    ) -> list[JsonObject]:
        """Comments on any issue or pull request of `repo` updated at or after `since`, least
        recently updated first; at most `limit` (a later `since` lists the rest)."""
        return self._listing(repo, "issue comments", "issues/comments", since, limit, deadline, {})

    def list_issue_events(
        self, repo: str, since: datetime, *, limit: int = _MAX_ITEMS, deadline: float | None = None
    ) -> list[JsonObject]:
        """Issue events of `repo` (labeled, renamed, closed, ...) created at or after `since`,
        newest first, as GitHub lists them (it has no `since` for them: the walk stops at the
        first page reaching back past it); at most `limit`."""
        return self._listing(repo, "issue events", "issues/events", since, limit, deadline, None)

    def get_pull(self, repo: str, number: int, *, deadline: float | None = None) -> JsonObject:
        """Pull request `number` of `repo` with its head, base and merge state."""
        path = f"/repos/{_check_repo(repo)}/pulls/{_check_number(number)}"

        def attempt() -> JsonObject:
            data = self._request("GET", path, deadline)
            if not isinstance(data, dict):
                raise self._unexpected("GET", path, "a pull request object")
            return data

        return self._retrying(f"get pull request {repo}#{number}", attempt, deadline)

    # -- plumbing -------------------------------------------------------------------------------

    def _retrying(self, what: str, attempt: Callable[[], T], deadline: float | None) -> T:
        return self._http.retrying(f"could not {what}", attempt, deadline=deadline, advice=_GIVE_UP)

    def _listing(
        self,
        repo: str,
        noun: str,
        resource: str,
        since: datetime,
        limit: int,
        deadline: float | None,
        query: Mapping[str, str] | None,
    ) -> list[JsonObject]:
        """At most `limit` items of /repos/{repo}/{resource} from `since` on. With a `query`,
        GitHub filters by `since` and lists oldest first; without one (issue events) it lists
        newest first and the walk stops at the first page reaching back past `since`."""
        path = f"/repos/{_check_repo(repo)}/{resource}"
        count = _check_limit(limit)
        after = _since(since)
        params: dict[str, str | int] = {"per_page": min(count, 100)}
        if query is not None:
            params = {**query, "since": after, "sort": "updated", "direction": "asc", **params}

        def attempt() -> list[JsonObject]:
            found: list[JsonObject] = []
            for page in self._pages(path, deadline, params):
                items = [item for item in page if isinstance(item, dict)]
                recent = (
                    items if query is not None else [i for i in items if _at_or_after(i, since)]
                )
                found.extend(recent)
                # Stopping here also keeps the walk within _MAX_PAGES, whose overrun is an error.
                if len(found) >= count or len(recent) < len(items):
                    break
            return found[:count]

        return self._retrying(f"list the {noun} of {repo}", attempt, deadline)

    def _find_comment(self, path: str, line: str, deadline: float | None) -> int | None:
        for page in self._pages(path, deadline):
            for item in page:
                if isinstance(item, dict) and has_marker(item.get("body"), line):
                    return self._field(item, "id", int, "GET", path)
        return None

    def _pages(
        self, path: str, deadline: float | None, query: Mapping[str, str | int] | None = None
    ) -> Iterator[list[object]]:
        url: str | None = path
        params: dict[str, str | int] | None = (
            dict(query) if query is not None else {"per_page": 100}
        )
        for _ in range(_MAX_PAGES):
            if url is None:
                return
            response = self._send("GET", url, deadline, params=params)
            data = self._json(response, "GET", path)
            if not isinstance(data, list):
                raise self._unexpected("GET", path, "a list")
            yield data
            url = response.links.get("next", {}).get("url")
            params = None  # the next link carries its own query
            if url is not None and not self._http.same_origin(url):
                # The token would follow the link; only ever send it back to the configured API.
                raise self._http.refused(
                    f"GET {path}: GitHub's pagination link points "
                    f"outside {self._http.where}; check ADE_GITHUB__API_URL (a proxy may be "
                    "rewriting links)"
                )
        raise self._http.refused(
            f"GET {path}: more than {_MAX_PAGES} pages of results; "
            "the marker search stopped rather than post a possible duplicate"
        )

    def _request(
        self,
        method: str,
        path: str,
        deadline: float | None,
        *,
        json: object = None,
        params: Mapping[str, str | int] | None = None,
    ) -> object:
        return self._json(
            self._send(method, path, deadline, json=json, params=params), method, path
        )

    def _send(
        self,
        method: str,
        url: str,
        deadline: float | None,
        *,
        json: object = None,
        params: Mapping[str, str | int] | None = None,
    ) -> httpx.Response:
        return self._http.send(
            method, url, deadline=deadline, advice=self._advice, json=json, params=params
        )

    def _advice(self, status: int) -> str:
        if status == 401:
            return (
                "check ADE_GITHUB__TOKEN: it is missing, expired or revoked"
                if self._token
                else "set ADE_GITHUB__TOKEN to a token with access to the repository"
            )
        return _ADVICE.get(status, "check the request and ADE_GITHUB__API_URL")

    def _json(self, response: httpx.Response, method: str, path: str) -> object:
        try:
            return response.json()
        except ValueError:
            raise self._unexpected(method, path, "JSON") from None

    def _field(self, data: object, key: str, kind: type[T], method: str, path: str) -> T:
        value = data.get(key) if isinstance(data, dict) else None
        if isinstance(value, bool) or not isinstance(value, kind):
            noun = "an integer" if kind is int else "a string"
            raise self._unexpected(method, path, f"an object with {noun} {key!r}")
        return value

    def _unexpected(self, method: str, path: str, expected: str) -> IntegrationError:
        return self._http.refused(
            f"{method} {path}: GitHub answered with something other than {expected}; "
            "check that ADE_GITHUB__API_URL points at the REST API (e.g. https://host/api/v3)"
        )


def _check_repo(repo: str) -> str:
    if not _REPO.match(repo or ""):
        raise InvalidInputError(f"GitHub repository {repo!r} must look like 'owner/name'")
    return repo


def _check_number(number: int) -> int:
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise InvalidInputError(f"issue or pull request number must be a positive int: {number!r}")
    return number


def _check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= _MAX_ITEMS:
        raise InvalidInputError(f"a listing limit must be an int from 1 to {_MAX_ITEMS}: {limit!r}")
    return limit


def _at_or_after(item: Mapping[str, object], since: datetime) -> bool:
    created = item.get("created_at")
    try:
        when = datetime.fromisoformat(created) if isinstance(created, str) else None
    except ValueError:
        when = None
    # An event without a readable time is kept: the poller decides what to make of it.
    return when is None or when.tzinfo is None or when >= since


def _since(when: datetime) -> str:
    """GitHub's `since` form (`2024-05-01T10:00:00Z`); a naive datetime has no meaning here."""
    if when.tzinfo is None or when.utcoffset() is None:
        raise InvalidInputError(f"`since` must be timezone-aware (UTC), got {when.isoformat()}")
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rate_limited(response: httpx.Response) -> bool:
    """A 403 that is GitHub's (primary or secondary) rate limit, not a missing permission."""
    headers = response.headers
    return response.status_code == 403 and (
        "retry-after" in headers or headers.get("x-ratelimit-remaining") == "0"
    )


def _retry_after(headers: httpx.Headers) -> float | None:
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


def _github_message(response: httpx.Response) -> str:
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
