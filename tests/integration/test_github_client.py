"""GithubClient and send_notification over real loopback HTTP against a ScriptedServer.

No database or broker: these tests only need a socket on 127.0.0.1.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from ade_tasks.errors import InvalidInputError
from ade_tasks.retry import RetryPolicy
from ade_workers.integrations.github import GithubClient
from ade_workers.integrations.http import IntegrationError, IntegrationUnavailableError
from ade_workers.integrations.notify import send_notification
from tests.fake_http import ScriptedServer

REPO = "acme/widgets"
TOKEN = "ghp_SECRET_test_token_123"
MARKER = "run=r-1 step=comment"
FAST = RetryPolicy(attempts=3, initial_delay=0.01, max_delay=0.05)
COMMENTS = f"/repos/{REPO}/issues/7/comments"


@pytest.fixture
def github() -> Iterator[ScriptedServer]:
    with ScriptedServer(repos=[REPO], token=TOKEN) as server:
        yield server


@pytest.fixture
def client(github: ScriptedServer) -> Iterator[GithubClient]:
    with GithubClient(base_url=github.url, token=TOKEN, timeout=0.3, policy=FAST) as client:
        yield client


@pytest.fixture
def webhook() -> Iterator[ScriptedServer]:
    with ScriptedServer("webhook") as server:
        yield server


def test_upsert_creates_a_comment_with_the_hidden_marker(
    github: ScriptedServer, client: GithubClient
) -> None:
    comment = client.upsert_comment(REPO, 7, "Build passed", MARKER)

    assert comment.created
    assert comment.url.endswith(f"#issuecomment-{comment.id}")
    assert github.comment_bodies(REPO, 7) == [f"Build passed\n\n<!-- ade:{MARKER} -->"]
    sent = github.requests_to("POST", COMMENTS)[0]
    assert sent.headers["authorization"] == f"Bearer {TOKEN}"
    assert sent.headers["user-agent"] == "ade-tasks"
    assert sent.headers["accept"] == "application/vnd.github+json"
    assert sent.headers["x-github-api-version"] == "2022-11-28"


def test_a_retried_upsert_updates_the_same_comment(
    github: ScriptedServer, client: GithubClient
) -> None:
    # Given a comment already posted for this run and step, next to someone else's
    github.add_comment(REPO, 7, "LGTM")
    first = client.upsert_comment(REPO, 7, "Build running", MARKER)
    # When the run is retried and upserts again
    second = client.upsert_comment(REPO, 7, "Build passed", MARKER)
    # Then the earlier comment was edited, not duplicated
    assert not second.created and second.id == first.id
    assert github.comment_bodies(REPO, 7) == ["LGTM", f"Build passed\n\n<!-- ade:{MARKER} -->"]


def test_another_steps_marker_is_not_mistaken_for_ours(
    github: ScriptedServer, client: GithubClient
) -> None:
    github.add_comment(REPO, 7, f"old\n\n<!-- ade:{MARKER}x -->")
    github.add_comment(REPO, 7, f"> quoted\n> <!-- ade:{MARKER} -->")

    assert client.upsert_comment(REPO, 7, "new", MARKER).created
    assert len(github.comment_bodies(REPO, 7)) == 3


def test_the_marker_is_found_on_a_later_page(github: ScriptedServer, client: GithubClient) -> None:
    # Given 130 comments, ours being the 120th (page 2 of 100)
    for i in range(130):
        body = f"ours\n\n<!-- ade:{MARKER} -->" if i == 119 else f"chatter {i}"
        github.add_comment(REPO, 7, body)
    # When upserting
    comment = client.upsert_comment(REPO, 7, "updated", MARKER)
    # Then the client followed the Link header and patched the 120th comment
    assert not comment.created
    listed = github.requests_to("GET", COMMENTS)
    assert [r.query.get("page") for r in listed] == [None, ["2"]]
    bodies = github.comment_bodies(REPO, 7)
    assert len(bodies) == 130 and bodies[119].startswith("updated")


def test_a_500_is_retried_and_leaves_one_comment(
    github: ScriptedServer, client: GithubClient
) -> None:
    github.fail_next(status=500)

    comment = client.upsert_comment(REPO, 7, "Build passed", MARKER)

    assert comment.created
    assert len(github.comment_bodies(REPO, 7)) == 1
    assert len(github.requests_to("GET", COMMENTS)) == 2


def test_a_post_whose_answer_was_lost_is_found_again_not_reposted(
    github: ScriptedServer, client: GithubClient
) -> None:
    # Given GitHub creates the comment but answers after the client stopped waiting
    github.delay_next(0.6, method="POST")
    # When upserting
    comment = client.upsert_comment(REPO, 7, "Build passed", MARKER)
    # Then the retry's listing found the comment and edited it: still exactly one
    assert not comment.created
    assert len(github.comment_bodies(REPO, 7)) == 1


def test_a_403_with_retry_after_waits_then_succeeds(github: ScriptedServer) -> None:
    # Given a secondary rate limit asking for a pause longer than the client's own backoff
    github.fail_next(
        status=403,
        headers={"Retry-After": "0.2"},
        message="You have exceeded a secondary rate limit.",
    )
    policy = RetryPolicy(attempts=1, initial_delay=0.01, max_delay=1.0)
    with GithubClient(base_url=github.url, token=TOKEN, timeout=0.3, policy=policy) as client:
        # When upserting
        started = time.monotonic()
        comment = client.upsert_comment(REPO, 7, "Build passed", MARKER)
        # Then the client waited as asked and succeeded
        assert time.monotonic() - started >= 0.2
    assert comment.created and len(github.comment_bodies(REPO, 7)) == 1


def test_an_exhausted_rate_limit_is_retried(github: ScriptedServer, client: GithubClient) -> None:
    github.fail_next(
        status=403,
        headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(time.time()))},
        message="API rate limit exceeded",
    )

    assert client.upsert_comment(REPO, 7, "x", MARKER).created


def test_timeouts_on_every_attempt_give_a_clear_error(
    github: ScriptedServer, client: GithubClient
) -> None:
    # Given GitHub answering every request too late
    github.delay_next(0.6, times=10)
    # When upserting with 3 retries
    with pytest.raises(IntegrationUnavailableError) as caught:
        client.upsert_comment(REPO, 7, "x", MARKER)
    # Then the error names what, where and how many attempts, and never the token
    message = str(caught.value)
    assert f"GET {COMMENTS}" in message
    assert "did not answer within 0.3s" in message
    assert "gave up after 4 attempts" in message
    assert TOKEN not in message and TOKEN not in repr(caught.value)
    assert TOKEN not in repr(client)
    assert len(github.requests_to("GET", COMMENTS)) == 4


def test_a_deadline_stops_retries_early(github: ScriptedServer) -> None:
    github.fail_next(status=502, times=10)
    slow = RetryPolicy(attempts=5, initial_delay=0.2)
    with GithubClient(base_url=github.url, token=TOKEN, timeout=0.3, policy=slow) as client:
        with pytest.raises(IntegrationUnavailableError, match="deadline") as caught:
            client.upsert_comment(REPO, 7, "x", MARKER, deadline=time.monotonic() + 0.3)
    assert "gave up after 2 attempts" in str(caught.value)
    assert len(github.requests) == 2


def test_a_bad_token_is_not_retried_and_names_the_setting(github: ScriptedServer) -> None:
    wrong = "ghp_WRONG_token_456"
    with GithubClient(base_url=github.url, token=wrong, timeout=0.3, policy=FAST) as client:
        with pytest.raises(IntegrationError) as caught:
            client.upsert_comment(REPO, 7, "x", MARKER)
    message = str(caught.value)
    assert caught.value.status == 401
    assert f"GET {COMMENTS}" in message and "401" in message and "Bad credentials" in message
    assert "ADE_GITHUB__TOKEN" in message and wrong not in message
    assert not isinstance(caught.value, IntegrationUnavailableError)
    assert len(github.requests) == 1


def test_a_failing_poll_listing_advises_on_polling_not_on_a_steps_retries(
    github: ScriptedServer, client: GithubClient
) -> None:
    # Given GitHub failing every listing of the issues (issue 37, finding 3: the poller's
    # warning told the operator to raise a step's retry attempts, though no step is involved)
    github.fail_next(status=502, times=10)
    with pytest.raises(IntegrationUnavailableError) as caught:
        client.list_issues(REPO, datetime(2024, 5, 1, tzinfo=UTC))
    message = str(caught.value)
    assert "could not list the issues of acme/widgets" in message
    assert "polling tries again after its backoff" in message
    assert "ADE_GITHUB__API_URL" in message and "step" not in message


def test_a_listing_refused_403_asks_for_read_access_not_write(github: ScriptedServer) -> None:
    github.fail_next(status=403, times=1)
    with GithubClient(base_url=github.url, token=TOKEN, timeout=0.3, policy=FAST) as client:
        with pytest.raises(IntegrationError) as caught:
            client.list_issue_comments(REPO, datetime(2024, 5, 1, tzinfo=UTC))
    message = str(caught.value)
    assert caught.value.status == 403
    assert "read access" in message and "write access" not in message


def test_an_unknown_repository_is_a_404_error(github: ScriptedServer, client: GithubClient) -> None:
    with pytest.raises(IntegrationError) as caught:
        client.add_labels("acme/missing", 7, ["bug"])
    assert caught.value.status == 404
    assert "POST /repos/acme/missing/issues/7/labels answered 404 (Not Found)" in str(caught.value)
    assert len(github.requests) == 1


def test_a_malformed_repository_is_refused_before_any_request(
    github: ScriptedServer, client: GithubClient
) -> None:
    with pytest.raises(InvalidInputError, match="owner/name"):
        client.upsert_comment("widgets", 7, "x", MARKER)
    assert github.requests == []


def test_add_labels_returns_every_label_of_the_issue(
    github: ScriptedServer, client: GithubClient
) -> None:
    client.add_labels(REPO, 7, ["triaged"])

    labels = client.add_labels(REPO, 7, ["ade", "triaged", "ade"])

    assert labels == ["triaged", "ade"]
    assert github.requests_to("POST")[-1].json == {"labels": ["ade", "triaged"]}


def test_open_draft_pr_twice_updates_the_same_pr(
    github: ScriptedServer, client: GithubClient
) -> None:
    # Given a draft PR opened by a first run
    first = client.open_draft_pr(REPO, "ade/fix-1", "main", "Fix", "First try", MARKER)
    # When a retried run opens it again
    second = client.open_draft_pr(REPO, "ade/fix-1", "main", "Fix v2", "Second try", MARKER)
    # Then the same PR was updated
    assert first.created and not second.created and second.number == first.number
    [pull] = github.open_pulls(REPO)
    assert pull["draft"] is True and pull["title"] == "Fix v2"
    assert pull["body"] == f"Second try\n\n<!-- ade:{MARKER} -->"
    listing = github.requests_to("GET", f"/repos/{REPO}/pulls")[0]
    assert listing.query == {"head": ["acme:ade/fix-1"], "state": ["open"]}


def test_notify_posts_text_with_the_marker(webhook: ScriptedServer) -> None:
    send_notification(
        f"{webhook.url}/hooks/T1/B2/s3cr3t", "Deploy done", marker=MARKER, policy=FAST
    )

    [sent] = webhook.requests_to("POST")
    assert sent.path == "/hooks/T1/B2/s3cr3t"
    assert sent.json == {"text": f"Deploy done\n(ade {MARKER})"}


def test_notify_retries_a_500(webhook: ScriptedServer) -> None:
    webhook.fail_next(status=500)

    send_notification(f"{webhook.url}/hooks/x", "hi", marker=MARKER, policy=FAST, timeout=0.3)

    assert len(webhook.requests_to("POST")) == 2


def test_a_refusing_notify_webhook_is_not_named_in_the_error(webhook: ScriptedServer) -> None:
    # Given a webhook that was revoked (and echoes its own address back)
    url = f"{webhook.url}/hooks/T1/B2/s3cr3t"
    webhook.fail_next(status=404, message=f"no_service for {url}")
    # When notifying
    with pytest.raises(IntegrationError) as caught:
        send_notification(url, "hi", marker=MARKER, policy=FAST, timeout=0.3)
    # Then the error says what happened without the URL, and was not retried
    assert "the notify webhook answered 404" in str(caught.value)
    assert "s3cr3t" not in str(caught.value) and "s3cr3t" not in repr(caught.value)
    assert len(webhook.requests) == 1


def test_a_timing_out_notify_webhook_is_not_named_in_the_error(webhook: ScriptedServer) -> None:
    url = f"{webhook.url}/hooks/T1/B2/s3cr3t"
    webhook.delay_next(0.6, times=2)
    policy = RetryPolicy(attempts=1, initial_delay=0.01)

    with pytest.raises(IntegrationUnavailableError) as caught:
        send_notification(url, "hi", marker=MARKER, policy=policy, timeout=0.3)

    message = str(caught.value)
    assert "the notify webhook did not answer within 0.3s" in message
    assert "gave up after 2 attempts" in message
    assert "s3cr3t" not in message and caught.value.__cause__ is None


def test_notify_refuses_a_non_http_url() -> None:
    with pytest.raises(InvalidInputError, match="http") as caught:
        send_notification("file:///etc/s3cr3t", "hi", marker=MARKER, policy=FAST)
    assert "s3cr3t" not in str(caught.value)
