"""The shared integration HTTP client over real loopback HTTP against a scripted server:
Retry-After, retries and giving up, how answers map to the error pair, and scrubbing.

No database or broker: these tests only need a socket on 127.0.0.1. Waits are recorded by a
fake `sleep`, so a Retry-After of 30 s costs nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing
from email.utils import formatdate

import httpx
import pytest

from ade_tasks.retry import RetryPolicy
from ade_workers.agents.providers.openai import OpenAIProvider
from ade_workers.integrations.github import GithubClient
from ade_workers.integrations.http import (
    IntegrationClient,
    IntegrationError,
    IntegrationUnavailableError,
)
from ade_workers.integrations.notify import send_notification
from tests.fake_http import ScriptedServer
from tests.fake_llm import Reply, ScriptedModelServer
from tests.support import free_port

TOKEN = "tok-SECRET-4711"
POLICY = RetryPolicy(attempts=2, initial_delay=0.25, max_delay=60.0)


@pytest.fixture
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as running:
        yield running


class Waits:
    """A `sleep` that records how long it was asked to wait, and returns at once."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.seconds.append(seconds)


def make(url: str, waits: Waits, *, timeout: float = 2.0, **options: object) -> IntegrationClient:
    return IntegrationClient(
        "Example", url, url_fix="check ADE_EXAMPLE__URL", timeout=timeout, policy=POLICY,
        headers={"Authorization": f"Bearer {TOKEN}"}, secrets=[TOKEN], sleep=waits,
        **options,  # type: ignore[arg-type]
    )  # fmt: skip


def fetch(client: IntegrationClient, deadline: float | None = None) -> httpx.Response:
    """GET /thing under the client's retry policy."""
    return client.retrying(
        "could not fetch the thing",
        lambda: client.send("GET", "/thing", deadline=deadline, advice=lambda s: f"fix {s}"),
        deadline=deadline,
        advice="try again later",
    )


def test_retry_after_in_seconds_is_waited_out(server: ScriptedModelServer) -> None:
    # Given a 429 asking for 7 s, then an answer
    server.script(Reply(status=429, headers={"Retry-After": "7"}, body={}), Reply(body={"a": 1}))
    waits = Waits()
    with make(server.url, waits) as client:
        # When fetching
        answer = fetch(client)
    # Then the client waited the 7 s asked for (longer than its own 0.25 s backoff)
    assert answer.json() == {"a": 1}
    assert waits.seconds == [7.0]
    assert len(server.requests) == 2


def test_retry_after_as_an_http_date_is_waited_out(server: ScriptedModelServer) -> None:
    when = formatdate(time.time() + 30, usegmt=True)
    server.script(Reply(status=503, headers={"Retry-After": when}, body={}), Reply(body={}))
    waits = Waits()
    with make(server.url, waits) as client:
        fetch(client)
    [wait] = waits.seconds
    assert 28.0 <= wait <= 30.0  # an HTTP date has whole seconds


def test_without_retry_after_the_policys_backoff_is_waited(server: ScriptedModelServer) -> None:
    server.script(Reply(status=502, body={}), Reply(status=500, body={}), Reply(body={}))
    waits = Waits()
    with make(server.url, waits) as client:
        fetch(client)
    assert waits.seconds == [0.25, 0.5]


def test_retries_then_gives_up_saying_what_how_often_and_why(server: ScriptedModelServer) -> None:
    # Given a service failing every attempt
    server.script(*[Reply(status=500, raw="overloaded") for _ in range(3)])
    waits = Waits()
    with make(server.url, waits) as client:
        # When fetching with 2 retries
        with pytest.raises(IntegrationUnavailableError) as caught:
            fetch(client)
    # Then the first try and both retries were made, and the error says it all
    assert len(server.requests) == 3
    assert caught.value.message == (
        "could not fetch the thing: GET /thing answered 500 "
        "(overloaded); gave up after 3 attempts (the retry policy allows no more); "
        "try again later"
    )
    assert (caught.value.service, caught.value.status) == (f"Example at {server.url}", 500)
    assert caught.value.__cause__ is None


def test_a_deadline_stops_the_retries_early(server: ScriptedModelServer) -> None:
    server.script(*[Reply(status=503, headers={"Retry-After": "5"}, body={}) for _ in range(3)])
    with make(server.url, Waits()) as client:
        with pytest.raises(IntegrationUnavailableError) as caught:
            fetch(client, deadline=time.monotonic() + 2.0)
    assert "gave up after 1 attempt (the deadline leaves no time for another)" in str(caught.value)
    assert len(server.requests) == 1


def test_a_passed_deadline_sends_nothing(server: ScriptedModelServer) -> None:
    with make(server.url, Waits()) as client:
        with pytest.raises(
            IntegrationUnavailableError, match="the run's deadline passed before Example at"
        ):
            client.send("GET", "/thing", deadline=time.monotonic() - 1, advice=str)
    assert server.requests == []


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
def test_not_now_answers_are_unavailable(server: ScriptedModelServer, status: int) -> None:
    server.script(Reply(status=status, body={}))
    with make(server.url, Waits()) as client:
        with pytest.raises(IntegrationUnavailableError) as caught:
            client.send("GET", "/thing", deadline=None, advice=str)
    assert caught.value.status == status


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 422])
def test_refusals_are_not_retried_and_end_in_the_callers_advice(
    server: ScriptedModelServer, status: int
) -> None:
    # Given a refusal echoing the credential back
    server.script(Reply(status=status, raw=f"no, {TOKEN}"))
    with make(server.url, Waits()) as client:
        # When fetching under a retry policy
        with pytest.raises(IntegrationError) as caught:
            fetch(client)
    # Then it was asked once, and the error says what happened and what to do, without the token
    assert not isinstance(caught.value, IntegrationUnavailableError)
    assert caught.value.message == (f"GET /thing answered {status} (no, ***); fix {status}")
    assert caught.value.status == status
    assert len(server.requests) == 1


def test_a_callers_rate_limit_turns_a_refusal_into_come_back_later(
    server: ScriptedModelServer,
) -> None:
    server.script(Reply(status=403, headers={"X-Wait": "3"}, body={}), Reply(body={}))
    waits = Waits()
    with make(
        server.url,
        waits,
        rate_limited=lambda r: "x-wait" in r.headers,
        retry_after=lambda h: float(h["x-wait"]) if "x-wait" in h else None,
    ) as client:
        fetch(client)
    assert waits.seconds == [3.0]


def test_a_callers_explain_reads_the_error_body(server: ScriptedModelServer) -> None:
    server.script(Reply(status=400, body={"error": "bad field"}))
    with make(server.url, Waits(), explain=lambda r: r.json()["error"]) as client:
        with pytest.raises(IntegrationError, match=r"answered 400 \(bad field\); fix 400"):
            client.send("GET", "/thing", deadline=None, advice=lambda s: f"fix {s}")


def test_no_answer_in_time_is_unavailable(server: ScriptedModelServer) -> None:
    server.script(Reply(delay=2.0, body={}))
    with make(server.url, Waits(), timeout=0.2) as client:
        with pytest.raises(IntegrationUnavailableError) as caught:
            client.send("GET", "/thing", deadline=None, advice=str)
    assert caught.value.message == f"GET /thing: Example at {server.url} did not answer within 0.2s"


def test_a_refused_connection_is_unavailable_and_names_the_failure() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with make(url, Waits()) as client:
        with pytest.raises(IntegrationUnavailableError) as caught:
            client.send("GET", "/thing", deadline=None, advice=str)
    assert caught.value.message.startswith(
        f"GET /thing: could not reach Example at {url} (ConnectError: "
    )


def test_a_secret_url_never_appears_even_when_the_service_echoes_it(
    server: ScriptedModelServer,
) -> None:
    url = f"{server.url}/hooks/T1/B2/s3cr3t"
    server.script(Reply(status=404, raw=f"no_service for {url}"))
    with make(url, Waits(), urls="hidden") as client:
        with pytest.raises(IntegrationError) as caught:
            client.send("POST", url, deadline=None, advice=str, json={})
    assert caught.value.message == "Example answered 404 (no_service for ***); 404"
    assert caught.value.service == "Example"
    assert server.requests[0].path == "/hooks/T1/B2/s3cr3t"


def test_links_are_followed_with_credentials_only_to_the_configured_origin() -> None:
    with make("https://api.example.com/v3", Waits()) as client:
        assert client.same_origin("/repos/a/b?page=2")
        assert client.same_origin("https://api.example.com/v3/repos/a/b?page=2")
        assert not client.same_origin("https://evil.example.com/v3/repos/a/b")
        assert not client.same_origin("http://api.example.com/v3/repos/a/b")
        assert not client.same_origin("https://api.example.com:8443/v3/repos/a/b")


def test_every_integrations_errors_carry_its_service_label() -> None:
    # GitHub
    with ScriptedServer(repos=["acme/widgets"]) as github:
        with GithubClient(base_url=github.url, token=TOKEN, policy=POLICY) as client:
            with pytest.raises(IntegrationError) as refused:
                client.add_labels("acme/missing", 7, ["bug"])
    assert refused.value.service == f"GitHub at {github.url}"
    # a notify webhook, whose URL is its secret
    with ScriptedServer("webhook") as webhook:
        webhook.fail_next(status=410)
        with pytest.raises(IntegrationError) as gone:
            send_notification(f"{webhook.url}/hooks/x", "hi", marker="run=r step=s", policy=POLICY)
    assert gone.value.service == "the notify webhook"
    # a model provider
    with ScriptedModelServer() as model:
        model.script(Reply(status=404, body={}))
        with closing(OpenAIProvider(base_url=f"{model.url}/v1", api_key=TOKEN)) as provider:
            with pytest.raises(IntegrationError) as missing:
                provider.complete([], [], model="m", max_tokens=1, deadline=None)
    assert missing.value.service == f"provider 'openai' at {model.url}/v1"
    assert missing.value.message.startswith(f"POST {model.url}/v1/chat/completions answered 404")
    assert "check the model name 'm' and ADE_PROVIDERS__OPENAI__BASE_URL" in missing.value.message
