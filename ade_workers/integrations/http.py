"""The one HTTP client for services outside the cluster, and the one error pair they raise.

Each integration (GitHub, a model provider, a notify webhook) holds an `IntegrationClient` and
keeps only what is its own: paths and bodies, what its error bodies say (`explain`), what to do
about a refusal (`advice`), and special cases such as GitHub's rate-limit headers
(`retry_after`, `rate_limited`). The client does the rest the same way for all of them:

- each request's timeout is bounded by the run's deadline;
- no answer, 408, 429 and 5xx raise `IntegrationUnavailableError` (a `TransientError`, with
  `retry_after` from `Retry-After`, read by `ade_tasks.retry.retry_after_seconds`), which
  `retrying` retries under a `RetryPolicy`; any other refusal raises `IntegrationError`, which
  says what to do;
- no message carries a credential: tokens and keys read `***`, a URL's userinfo is never shown,
  and a service whose URL is itself the secret (a webhook) is never shown by its URL at all;
- messages name the request as the service prefers (`urls`): by method and path ("GET
  /repos/a/b/issues", the service named where it did not answer), by method and whole URL
  (model providers: several endpoints), or only by the service ("the notify webhook"); both
  errors carry the service ("GitHub at https://api.github.com") as `service` and the HTTP status
  (if any) as `status`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Literal, TypeVar

import httpx

from ade_tasks.errors import AdeError, InvalidInputError, TransientError
from ade_tasks.retry import RetryPolicy, retry_after_seconds

T = TypeVar("T")
log = logging.getLogger(__name__)

EXCERPT = 300
"""Characters of a service's answer an error message quotes."""
#: Answers that mean "not now" rather than "no" (so does every 5xx).
RETRYABLE_STATUSES = frozenset({408, 429})
USER_AGENT = "ade-tasks"

UrlShown = Literal["path", "full", "hidden"]
"""How messages name a request: `METHOD /path`, `METHOD https://host/path`, or not at all (the
URL is the secret: only the service is named)."""


class IntegrationError(AdeError):
    """An outside service refused the request; repeating it unchanged will not help."""

    def __init__(
        self, message: str | None = None, *, service: str | None = None, status: int | None = None
    ) -> None:
        super().__init__(message)
        self.service = service
        self.status = status


class IntegrationUnavailableError(TransientError):
    """An outside service could not be reached, timed out or asked us to come back later."""

    def __init__(
        self,
        message: str | None = None,
        *,
        service: str | None = None,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.service = service
        self.status = status
        self.retry_after = retry_after


def excerpt(text: str, limit: int = EXCERPT) -> str:
    """At most `limit` characters of `text`, for an error message."""
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "..."


def _answer_text(response: httpx.Response) -> str:
    return excerpt(response.text)


def _retry_after_header(headers: httpx.Headers) -> float | None:
    return retry_after_seconds(headers.get("retry-after"))


def _never(_response: httpx.Response) -> bool:
    return False


class IntegrationClient:
    """Requests to one outside service: bounded by the run's deadline, retried under a policy,
    and failing with errors that name the service and never a credential."""

    def __init__(
        self,
        service: str,
        base_url: str,
        *,
        url_fix: str,
        timeout: float,
        policy: RetryPolicy,
        headers: Mapping[str, str] | None = None,
        secrets: Iterable[str | None] = (),
        urls: UrlShown = "path",
        follow_redirects: bool = False,
        explain: Callable[[httpx.Response], str] = _answer_text,
        retry_after: Callable[[httpx.Headers], float | None] = _retry_after_header,
        rate_limited: Callable[[httpx.Response], bool] = _never,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """`service` names it in messages; `url_fix` says what to do about a bad `base_url`;
        `urls` how messages show a request's URL.
        `explain` reads a refusal's body, `retry_after` the seconds its headers ask to wait, and
        `rate_limited` tells a refusal that is really "come back later"."""
        url = _checked_url(service, base_url, url_fix)
        if timeout <= 0:
            raise InvalidInputError(f"{service} timeout must be > 0 seconds, got {timeout}")
        self.timeout = timeout
        self.policy = policy
        # Shown in messages: never the userinfo part of a URL pasted with credentials.
        self.where = str(url.copy_with(username=None, password=None))
        self.service = service if urls == "hidden" else f"{service} at {self.where}"
        # Who did not answer: a full URL in the message already says where.
        self._who = service if urls == "full" else self.service
        self._urls = urls
        hidden = [*secrets, url.password]
        if urls == "hidden":
            # A webhook echoing its own address back must not smuggle it into a message.
            hidden += [base_url, str(url), url.path, url.raw_path.decode("ascii")]
        # Longest first, so a URL goes before the path inside it; "/" is no secret.
        self._secrets = sorted({s for s in hidden if s and len(s) > 1}, key=len, reverse=True)
        self._explain = explain
        self._retry_after = retry_after
        self._rate_limited = rate_limited
        self._sleep = sleep
        self._http = httpx.Client(
            base_url=url,
            headers={"User-Agent": USER_AGENT, **(headers or {})},
            timeout=timeout,
            transport=transport,
            follow_redirects=follow_redirects,
        )

    def __repr__(self) -> str:
        return f"IntegrationClient({self.service!r})"

    def __enter__(self) -> IntegrationClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the pooled connections."""
        self._http.close()

    # -- words ----------------------------------------------------------------------------------

    def scrub(self, text: str) -> str:
        """`text` with every credential of this client replaced by `***`."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def subject(self, method: str, url: str) -> str:
        """How messages name a request (see `urls`)."""
        return self._request(method, url) or self.service

    def _request(self, method: str, url: str) -> str | None:
        if self._urls == "hidden":
            return None
        target = httpx.URL(url)
        if self._urls == "path":
            return f"{method} {target.path if target.is_absolute_url else url}"
        full = target if target.is_absolute_url else httpx.URL(f"{self.where}{url}")
        return f"{method} {full.copy_with(username=None, password=None, query=None)}"

    def _prefix(self, method: str, url: str) -> str:
        request = self._request(method, url)
        return f"{request}: " if request else ""

    def refused(self, message: str, *, status: int | None = None) -> IntegrationError:
        """An `IntegrationError` of this service."""
        return IntegrationError(message, service=self.service, status=status)

    def unavailable(
        self, message: str, *, status: int | None = None, retry_after: float | None = None
    ) -> IntegrationUnavailableError:
        """An `IntegrationUnavailableError` of this service."""
        return IntegrationUnavailableError(
            message, service=self.service, status=status, retry_after=retry_after
        )

    def same_origin(self, url: str) -> bool:
        """True when `url` is relative or on the configured scheme, host and port: the only
        place this client's credentials may follow a link to."""
        target = httpx.URL(url)
        base = self._http.base_url
        if not target.is_absolute_url:
            return True
        return (target.scheme, target.host, target.port) == (base.scheme, base.host, base.port)

    # -- requests -------------------------------------------------------------------------------

    def send(
        self,
        method: str,
        url: str,
        *,
        deadline: float | None,
        advice: Callable[[int], str],
        json: object = None,
        params: Mapping[str, str | int] | None = None,
    ) -> httpx.Response:
        """One request, answered with success; `IntegrationUnavailableError` when the same
        request may succeed later, `IntegrationError` ending in `advice(status)` otherwise."""
        timeout = self.timeout
        if deadline is not None:
            timeout = min(timeout, deadline - time.monotonic())
            if timeout <= 0:
                raise self.unavailable(
                    f"{self._prefix(method, url)}the run's deadline passed before {self._who} "
                    "could be called"
                )
        response = self.exchange(method, url, timeout=timeout, json=json, params=params)
        if response.is_success:
            return response
        raise self._error_for(self.subject(method, url), response, advice)

    def exchange(
        self,
        method: str,
        url: str,
        *,
        timeout: float,
        json: object = None,
        params: Mapping[str, str | int] | None = None,
    ) -> httpx.Response:
        """One request and whatever status it was answered with; `IntegrationUnavailableError`
        when no answer came."""
        # `from None` throughout: httpx exceptions carry the request, and so the URL.
        try:
            return self._http.request(method, url, json=json, params=params, timeout=timeout)
        except httpx.TimeoutException:
            raise self.unavailable(
                f"{self._prefix(method, url)}{self._who} did not answer within {timeout:g}s"
            ) from None
        except httpx.TransportError as exc:
            raise self.unavailable(
                f"{self._prefix(method, url)}could not reach {self._who} "
                f"({type(exc).__name__}: {self.scrub(str(exc))})"
            ) from None

    def retrying(
        self, what: str, attempt: Callable[[], T], *, deadline: float | None, advice: str
    ) -> T:
        """`attempt()` under the policy (its IntegrationUnavailableError retried); when it keeps
        failing, one that says `what` failed, the last reason, how often it was tried, why it
        stopped, and `advice`."""
        tries = 0

        def counted() -> T:
            nonlocal tries
            tries += 1
            return attempt()

        def note(number: int, exc: TransientError, delay: float) -> None:
            log.warning("%s (retry %d in %.2fs): %s", what, number, delay, exc)

        try:
            return self.policy.run(counted, deadline=deadline, sleep=self._sleep, on_retry=note)
        except IntegrationUnavailableError as exc:
            why = (
                "the retry policy allows no more"
                if tries >= self.policy.max_tries
                else "the deadline leaves no time for another"
            )
            raise self.unavailable(
                f"{what}: {exc.message}; gave up after {tries} "
                f"attempt{'s' if tries != 1 else ''} ({why}); {advice}",
                status=exc.status,
                retry_after=exc.retry_after,
            ) from None

    def _error_for(
        self, subject: str, response: httpx.Response, advice: Callable[[int], str]
    ) -> AdeError:
        status = response.status_code
        said = self.scrub(self._explain(response))
        head = f"{subject} answered {status}" + (f" ({said})" if said else "")
        if status in RETRYABLE_STATUSES or status >= 500:
            return self.unavailable(
                head, status=status, retry_after=self._retry_after(response.headers)
            )
        if self._rate_limited(response):
            return self.unavailable(
                f"{head}: rate limited",
                status=status,
                retry_after=self._retry_after(response.headers),
            )
        return self.refused(f"{head}; {advice(status)}", status=status)


def _checked_url(service: str, url: str, fix: str) -> httpx.URL:
    # The URL itself is never quoted: it may be a webhook's secret or carry a password.
    try:
        parsed = httpx.URL(url.rstrip("/"))
    except (httpx.InvalidURL, TypeError, AttributeError):
        raise InvalidInputError(f"{service} URL is not a valid URL; {fix}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InvalidInputError(
            f"{service} URL must be http(s)://host[:port][/path], got scheme "
            f"{parsed.scheme!r}; {fix}"
        )
    return parsed
