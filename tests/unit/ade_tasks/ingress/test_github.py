"""GitHub deliveries normalized: every recorded example payload, pings, unknown and broken ones."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ade_tasks.ingress.event import SUMMARY_MAX, NormalizedEvent
from ade_tasks.ingress.github import normalize

# GitHub's own examples (octokit/webhooks), in tests/fixtures/github.
from tests.fixtures import GITHUB_FIXTURES as FIXTURES

REPO_NAME = "Codertocat/Hello-World"
PR_HEAD_SHA = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
PR_TITLE = "Update the README with new information."
PR_BODY = "This is a pretty simple change that we need to pull into master."
ISSUE_TITLE = "Spelling error in the README file"
ISSUE_BODY = "It looks like you accidently spelled 'commit' with two 't's."
PR = {
    "repo": REPO_NAME,
    "number": 2,
    "branch": "changes",
    "base": "master",
    "title": PR_TITLE,
    "body": PR_BODY,
    "author": "Codertocat",
    "author_association": "OWNER",
    "labels": ("bug",),
    "draft": False,
    "merged": False,
    "head_sha": PR_HEAD_SHA,
    "url": "https://github.com/Codertocat/Hello-World/pull/2",
    "paths": (),
}
ISSUE = {
    "repo": REPO_NAME,
    "number": 1,
    "branch": None,
    "base": None,
    "title": ISSUE_TITLE,
    "body": ISSUE_BODY,
    "author": "Codertocat",
    "author_association": "OWNER",
    "labels": ("bug",),
    "draft": False,
    "merged": None,
    "head_sha": None,
    "url": "https://github.com/Codertocat/Hello-World/issues/1",
    "paths": (),
}

# fixture file -> (event header, event_key, trigger_type, expected fields)
EXPECTED: dict[str, tuple[str, str, str | None, dict[str, Any]]] = {
    "pull_request/opened.payload.json": (
        "pull_request",
        "pull_request.opened",
        "github.pr_opened",
        PR,
    ),
    "pull_request/reopened.payload.json": (
        "pull_request",
        "pull_request.reopened",
        "github.pr_opened",
        PR,
    ),
    "pull_request/synchronize.payload.json": (
        "pull_request",
        "pull_request.synchronize",
        "github.pr_updated",
        PR,
    ),
    "pull_request/labeled.payload.json": (
        "pull_request",
        "pull_request.labeled",
        "github.pr_updated",
        PR,
    ),
    # GitHub's example closes the PR without merging it.
    "pull_request/closed.payload.json": (
        "pull_request",
        "pull_request.closed",
        "github.pr_closed",
        PR,
    ),
    "issues/opened.payload.json": ("issues", "issues.opened", "github.issue_opened", ISSUE),
    "issues/labeled.payload.json": ("issues", "issues.labeled", "github.issue_labeled", ISSUE),
    "issue_comment/created.payload.json": (
        "issue_comment",
        "issue_comment.created",
        "github.issue_commented",
        {
            **ISSUE,
            "body": "You are totally right! I'll get this fixed right away.",
            "url": "https://github.com/Codertocat/Hello-World/issues/1#issuecomment-492700400",
        },
    ),
    "push/with-new-branch.payload.json": (
        "push",
        "push",
        "git.push",
        {
            "repo": REPO_NAME,
            "number": None,
            "branch": "master",
            "base": None,
            "title": "Initial commit",
            "author": "Codertocat",
            "labels": (),
            "merged": None,
            "head_sha": "6113728f27ae82c7b1a177c8d03f9e96e0adf246",
            "paths": ("README.md",),
        },
    ),
    # GitHub's example deletes the tag simple-tag: not a branch, no commits, no head.
    "push/payload.json": (
        "push",
        "push",
        "git.push",
        {
            "repo": REPO_NAME,
            "number": None,
            "branch": None,
            "base": None,
            "author": "Codertocat",
            "labels": (),
            "head_sha": None,
            "paths": (),
        },
    ),
    "check_run/completed.payload.json": (
        "check_run",
        "check_run.completed",
        "github.check_run_completed",
        {
            "repo": REPO_NAME,
            "number": 2,
            "branch": "changes",
            "base": "master",
            "title": "Octocoders-linter",
            "author": "Codertocat",
            "head_sha": PR_HEAD_SHA,
            "url": "https://github.com/Codertocat/Hello-World/runs/128620228",
            "merged": None,
            "paths": (),
        },
    ),
    "workflow_run/completed.payload.json": (
        "workflow_run",
        "workflow_run.completed",
        "github.workflow_run_completed",
        {
            "repo": "octo-org/octo-repo",
            "number": None,
            "branch": "master",
            "base": None,
            "title": "test",
            "body": "ci(action): update actions/setup-node digest to 8c91899",
            "author": "Codertocat",
            "head_sha": "3484a3fb816e0859fd6e1cea078d76385ff50625",
            "url": "https://github.com/octo-org/octo-repo/actions/runs/289782451",
        },
    ),
    "release/published.payload.json": (
        "release",
        "release.published",
        "github.release_published",
        {
            "repo": REPO_NAME,
            "number": None,
            "branch": None,
            "title": "0.0.1",  # the release has no name: its tag stands in
            "body": "",
            "author": "Codertocat",
            "url": "https://github.com/Codertocat/Hello-World/releases/tag/0.0.1",
        },
    ),
    "ping/payload.json": (
        "ping",
        "ping",
        None,
        {"repo": "Octocoders/Hello-World", "author": "Codertocat", "number": None},
    ),
    # Events without a trigger type of their own: only github.event starts on them.
    "check_suite/completed.payload.json": (
        "check_suite",
        "check_suite.completed",
        None,
        {
            "repo": REPO_NAME,
            "event": "check_suite",
            "action": "completed",
            "sender": "Codertocat",
            "number": 2,
            "branch": "changes",
            "head_sha": PR_HEAD_SHA,
        },
    ),
    "deployment_status/payload.json": (
        "deployment_status",
        "deployment_status.created",
        None,
        {
            "repo": REPO_NAME,
            "action": "created",
            "branch": "master",
            "head_sha": "f95f852bd8fca8fcc58a9a2d6c842781e32a215e",
            "number": None,
        },
    ),
    "pull_request_review_comment/created.payload.json": (
        "pull_request_review_comment",
        "pull_request_review_comment.created",
        None,
        {
            "repo": REPO_NAME,
            "number": 2,
            "branch": "changes",
            "base": "master",
            "title": PR_TITLE,
            "body": "Maybe you should use more emoji on this line.",
            "author": "Codertocat",
            "url": "https://github.com/Codertocat/Hello-World/pull/2#discussion_r284312630",
        },
    ),
}


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def test_every_fixture_file_is_covered() -> None:
    on_disk = {str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob("*.json")}
    assert on_disk == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_normalizes_to_its_trigger_and_fields(name: str) -> None:
    # Given one of GitHub's example deliveries
    header, key, trigger_type, fields = EXPECTED[name]
    # When it is normalized
    event = normalize(header, "delivery-1", load(name))
    # Then its key, trigger type and fields are those of the payload
    assert (event.source, event.delivery_id) == ("github", "delivery-1")
    assert event.event_key == key
    assert event.trigger_type == trigger_type
    assert {field: getattr(event, field) for field in fields} == fields
    assert 0 < len(event.summary) <= SUMMARY_MAX


def test_pr_summary_says_who_did_what_where() -> None:
    event = normalize("pull_request", "d", load("pull_request/opened.payload.json"))
    assert event.summary == f"PR #2 opened by Codertocat in {REPO_NAME}: {PR_TITLE}"


def test_merged_pr_is_pr_merged() -> None:
    # Given the closed example, but merged
    payload = load("pull_request/closed.payload.json")
    payload["pull_request"]["merged"] = True
    # When normalized
    event = normalize("pull_request", "d", payload)
    # Then it is a merge, not a close
    assert (event.trigger_type, event.merged) == ("github.pr_merged", True)
    assert event.summary.startswith("PR #2 merged by Codertocat")


@pytest.mark.parametrize("action", ["edited", "ready_for_review", "unlabeled"])
def test_other_pr_updates_are_pr_updated(action: str) -> None:
    payload = {**load("pull_request/synchronize.payload.json"), "action": action}
    event = normalize("pull_request", "d", payload)
    assert (event.event_key, event.trigger_type) == (f"pull_request.{action}", "github.pr_updated")


def test_comment_on_a_pr_is_pr_commented() -> None:
    # Given the comment example on an issue that is a pull request
    payload = load("issue_comment/created.payload.json")
    payload["issue"]["pull_request"] = {"url": "https://api.github.com/repos/o/r/pulls/1"}
    payload["comment"]["user"]["login"] = "reviewer"
    payload["comment"]["author_association"] = "NONE"
    # When normalized
    event = normalize("issue_comment", "d", payload)
    # Then it is a PR comment by the commenter, with the comment's association
    assert event.trigger_type == "github.pr_commented"
    assert (event.author, event.author_association) == ("reviewer", "NONE")
    assert event.title == ISSUE_TITLE


def test_edited_comment_matches_no_trigger() -> None:
    payload = {**load("issue_comment/created.payload.json"), "action": "edited"}
    event = normalize("issue_comment", "d", payload)
    assert (event.event_key, event.trigger_type) == ("issue_comment.edited", None)


def test_issue_closed_is_issue_closed() -> None:
    payload = {**load("issues/opened.payload.json"), "action": "closed"}
    assert normalize("issues", "d", payload).trigger_type == "github.issue_closed"


def test_submitted_review() -> None:
    # Given a review submitted on the example PR (GitHub's review payload carries the PR)
    pr = load("pull_request/opened.payload.json")
    payload = {
        "action": "submitted",
        "review": {
            "body": "Looks good",
            "state": "approved",
            "user": {"login": "alice"},
            "author_association": "MEMBER",
            "html_url": "https://github.com/Codertocat/Hello-World/pull/2#pullrequestreview-1",
        },
        "pull_request": pr["pull_request"],
        "repository": pr["repository"],
        "sender": {"login": "alice"},
    }
    # When normalized
    event = normalize("pull_request_review", "d", payload)
    # Then the reviewer is the author, the PR gives number and branches
    assert event.trigger_type == "github.pr_review_submitted"
    assert (event.author, event.author_association, event.body) == ("alice", "MEMBER", "Looks good")
    assert (event.number, event.branch, event.base, event.title) == (
        2,
        "changes",
        "master",
        PR_TITLE,
    )


def test_push_to_a_branch_collects_changed_paths_sorted_and_unique() -> None:
    # Given a push of two commits touching overlapping files
    payload = load("push/with-new-branch.payload.json")
    payload["ref"] = "refs/heads/release/1.0"
    payload["commits"] = [
        {"added": ["src/b.py"], "modified": ["README.md"], "removed": []},
        {"added": [], "modified": ["src/b.py"], "removed": ["docs/old.md"]},
    ]
    # When normalized
    event = normalize("push", "d", payload)
    # Then the branch keeps its slashes and the paths are deduplicated and sorted
    assert event.branch == "release/1.0"
    assert event.paths == ("README.md", "docs/old.md", "src/b.py")
    assert "(2 commits)" in event.summary


def test_ping() -> None:
    event = normalize("ping", "d", load("ping/payload.json"))
    assert (event.event_key, event.trigger_type) == ("ping", None)
    assert event.summary == (
        "Ping from GitHub (hook 109948940): Anything added dilutes everything else."
    )


@pytest.mark.parametrize(
    ("header", "payload", "key"),
    [
        ("star", {"action": "created"}, "star.created"),
        ("fork", {}, "fork"),
        ("pull_request", {"action": "assigned"}, "pull_request.assigned"),
        ("check_run", {"action": "created"}, "check_run.created"),
        ("release", {"action": "created"}, "release.created"),
    ],
)
def test_unknown_events_and_actions_have_no_trigger_type(
    header: str, payload: dict[str, Any], key: str
) -> None:
    event = normalize(header, "d", payload)
    assert (event.event_key, event.trigger_type) == (key, None)
    assert event.summary


@pytest.mark.parametrize("body", [[1, 2], "text", None, 3])
def test_a_body_that_is_not_an_object_is_refused(body: Any) -> None:
    with pytest.raises(ValueError, match="must be a JSON object"):
        normalize("push", "d", body)


@pytest.mark.parametrize(("header", "delivery"), [("", "d"), ("push", " ")])
def test_missing_event_name_or_delivery_id_is_refused(header: str, delivery: str) -> None:
    with pytest.raises(ValueError, match="header"):
        normalize(header, delivery, {})


@pytest.mark.parametrize(
    ("header", "payload"),
    [
        ("pull_request", {"action": "opened"}),
        ("pull_request", {"action": "closed", "pull_request": "oops", "repository": []}),
        ("pull_request", {"action": "opened", "pull_request": {"labels": [None, {"name": 3}]}}),
        ("pull_request_review", {"action": "submitted"}),
        ("issues", {"action": "opened", "issue": {"number": "1", "user": None}}),
        ("issue_comment", {"action": "created"}),
        ("push", {}),
        ("push", {"ref": 5, "commits": [None, {"added": [None, 1]}], "head_commit": None}),
        ("check_run", {"action": "completed", "check_run": {"pull_requests": [None]}}),
        ("workflow_run", {"action": "completed"}),
        ("release", {"action": "published"}),
        ("ping", {}),
    ],
)
def test_missing_or_mistyped_fields_become_empty(header: str, payload: dict[str, Any]) -> None:
    # When a delivery lacks most of its fields
    event = normalize(header, "d", payload)
    # Then it still normalizes, to empty fields and a summary, and round-trips through JSON
    assert event.repo is None and event.number is None
    assert event.labels == () and event.paths == ()
    assert event.summary
    assert NormalizedEvent.from_payload(json.loads(json.dumps(event.to_payload()))) == event


def test_a_pr_payload_without_fields_still_gets_its_trigger_type() -> None:
    assert normalize("pull_request", "d", {"action": "opened"}).trigger_type == "github.pr_opened"


def test_long_titles_are_cut_in_the_summary() -> None:
    payload = load("pull_request/opened.payload.json")
    payload["pull_request"]["title"] = "word\n" * 100
    event = normalize("pull_request", "d", payload)
    assert len(event.summary) <= SUMMARY_MAX and event.summary.endswith("…")
    assert "\n" not in event.summary
    assert event.title == "word\n" * 100  # the field itself keeps the full text


# --- the event record ------------------------------------------------------------------------


def test_payload_round_trips_through_json() -> None:
    # Given a normalized push with paths
    event = normalize("push", "d", load("push/with-new-branch.payload.json"))
    # When it is stored as JSON and read back
    data = json.loads(json.dumps(event.to_payload()))
    # Then the fields keep the documented names, lists for tuples, and the event is equal
    assert data["paths"] == ["README.md"] and data["trigger_type"] == "git.push"
    assert set(data) == {
        "source",
        "delivery_id",
        "event_key",
        "trigger_type",
        "repo",
        "branch",
        "base",
        "number",
        "title",
        "body",
        "author",
        "author_association",
        "labels",
        "draft",
        "merged",
        "event",
        "action",
        "label",
        "sender",
        "by_engine",
        "data",
        "head_sha",
        "url",
        "paths",
        "summary",
    }
    assert NormalizedEvent.from_payload(data) == event


def test_from_payload_ignores_unknown_keys_and_fills_defaults() -> None:
    event = NormalizedEvent.from_payload(
        {"source": "file", "delivery_id": "x", "event_key": "file.changed", "future": 1}
    )
    assert event == NormalizedEvent(source="file", delivery_id="x", event_key="file.changed")


@pytest.mark.parametrize(
    "data",
    [
        {"delivery_id": "x", "event_key": "k"},
        {"source": "github", "delivery_id": "x", "event_key": "k", "number": "2"},
        {"source": "github", "delivery_id": "x", "event_key": "k", "number": True},
        {"source": "github", "delivery_id": "x", "event_key": "k", "labels": "bug"},
        {"source": "github", "delivery_id": "x", "event_key": "k", "draft": "no"},
        {"source": "mail", "delivery_id": "x", "event_key": "k"},
    ],
)
def test_from_payload_refuses_bad_fields(data: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="event"):
        NormalizedEvent.from_payload(data)
