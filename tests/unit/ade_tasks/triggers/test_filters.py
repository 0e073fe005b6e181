"""Trigger filters on normalized GitHub examples: each filter matching and not matching."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import TypeAdapter

from ade_tasks.ingress.event import NormalizedEvent
from ade_tasks.ingress.github import normalize
from ade_tasks.rules.triggers import GithubTrigger, Trigger
from ade_tasks.triggers.filters import trigger_matches, why_not
from tests.fixtures import GITHUB_FIXTURES as FIXTURES

TRIGGER: TypeAdapter[Any] = TypeAdapter(Trigger)
HELLO = "Codertocat/Hello-World"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def github(name: str, **changes: Any) -> NormalizedEvent:
    """The fixture `name` normalized, with `changes` merged into its main object first."""
    payload = load(name)
    event_name = name.split("/")[0]
    main = {"issue_comment": "comment", "issues": "issue"}.get(event_name, event_name)
    payload.get(main, {}).update(changes)
    return normalize(event_name, "delivery-1", payload)


def rule_trigger(**document: Any) -> Any:
    """A trigger as a rule file declares it, validated (aliases resolved) by the rule model."""
    return TRIGGER.validate_python(document)


OPENED = "pull_request/opened.payload.json"
PUSH = "push/with-new-branch.payload.json"


# --- trigger type ----------------------------------------------------------------------------


def test_type_must_equal_the_events_trigger_type() -> None:
    opened, synced = github(OPENED), github("pull_request/synchronize.payload.json")
    trigger = rule_trigger(type="github.pr_opened")
    assert trigger_matches(trigger, opened) is True
    assert trigger_matches(trigger, synced) is False
    assert why_not(trigger, synced) == (
        "wants github.pr_opened, event is github.pr_updated (pull_request.synchronize)"
    )


@pytest.mark.parametrize("alias", ["git.pr_opened", "github.pr_opened"])
def test_git_pr_alias_matches_github_pr_events(alias: str) -> None:
    # Both the validated model and a raw dict (as stored) resolve the alias
    assert trigger_matches(rule_trigger(type=alias), github(OPENED)) is True
    assert trigger_matches({"type": alias, "repo": HELLO}, github(OPENED)) is True


def test_commit_alias_is_git_commit() -> None:
    event = NormalizedEvent(
        source="git", delivery_id="c1", event_key="commit", trigger_type="git.commit"
    )
    assert trigger_matches({"type": "commit"}, event) is True
    assert trigger_matches({"type": "git.push"}, event) is False


def test_ping_matches_no_trigger() -> None:
    ping = normalize("ping", "d", load("ping/payload.json"))
    assert trigger_matches({"type": "github.pr_opened"}, ping) is False
    assert why_not({"type": "github.pr_opened"}, ping) == (
        "wants github.pr_opened, event is ping (no trigger type)"
    )


# --- GitHub filters --------------------------------------------------------------------------


def test_repo_is_compared_case_insensitively() -> None:
    event = github(OPENED)
    assert trigger_matches(rule_trigger(type="github.pr_opened", repo=HELLO), event) is True
    assert trigger_matches(rule_trigger(type="github.pr_opened", repo=HELLO.lower()), event)
    other = rule_trigger(type="github.pr_opened", repo="acme/api")
    assert trigger_matches(other, event) is False
    assert why_not(other, event) == f"repo {HELLO} is not acme/api"


def test_author_associations() -> None:
    # Given the rule of the design's pr-review example
    trigger = rule_trigger(
        type="github.pr_opened", repo=HELLO, author_associations=["OWNER", "MEMBER", "COLLABORATOR"]
    )
    # Then the owner's PR matches and a stranger's does not
    assert trigger_matches(trigger, github(OPENED)) is True
    stranger = github(OPENED, author_association="NONE")
    assert trigger_matches(trigger, stranger) is False
    assert why_not(trigger, stranger) == (
        "author association NONE is not one of OWNER, MEMBER, COLLABORATOR"
    )


def test_authors_are_logins_compared_case_insensitively() -> None:
    event = github(OPENED)
    assert trigger_matches(rule_trigger(type="github.pr_opened", authors=["codertocat"]), event)
    octocat = rule_trigger(type="github.pr_opened", authors=["octocat", "hubot"])
    assert trigger_matches(octocat, event) is False
    assert why_not(octocat, event) == "author Codertocat is not one of octocat, hubot"


def test_comment_author_is_the_commenter() -> None:
    # Given a comment by someone else on Codertocat's issue
    event = github("issue_comment/created.payload.json", user={"login": "hubot"})
    trigger = rule_trigger(type="github.issue_commented", authors=["hubot"])
    assert trigger_matches(trigger, event) is True


def test_keywords_appear_case_insensitively_in_title_or_body() -> None:
    # Given a comment mentioning @ADE in its body
    comment = "issue_comment/created.payload.json"
    mention = github(comment, body="Could @ADE fix this typo?")
    trigger = rule_trigger(type="github.issue_commented", keywords=["@ade", "/fix"])
    # Then the mention matches, the original comment does not
    assert trigger_matches(trigger, mention) is True
    assert trigger_matches(trigger, github(comment)) is False
    assert why_not(trigger, github(comment)) == "none of the keywords @ade, /fix in title or body"


def test_keywords_also_search_the_title() -> None:
    trigger = rule_trigger(type="github.issue_opened", keywords=["SPELLING"])
    assert trigger_matches(trigger, github("issues/opened.payload.json")) is True


def test_labels_must_all_be_present() -> None:
    event = github(OPENED)  # labelled "bug"
    assert trigger_matches(rule_trigger(type="github.pr_opened", labels=["bug"]), event)
    assert trigger_matches(rule_trigger(type="github.pr_opened", labels=["BUG"]), event)
    both = rule_trigger(type="github.pr_opened", labels=["bug", "urgent"])
    assert trigger_matches(both, event) is False
    assert why_not(both, event) == "missing label(s) urgent"


def test_branches_are_globs_over_the_head_branch() -> None:
    event = github(OPENED)  # head "changes", base "master"
    assert trigger_matches(rule_trigger(type="github.pr_opened", branches=["chan*"]), event)
    main = rule_trigger(type="github.pr_opened", branches=["main", "feature/*"])
    assert trigger_matches(main, event) is False
    assert why_not(main, event) == "branch changes matches none of main, feature/*"


def test_base_branches_are_globs_over_the_base() -> None:
    event = github(OPENED)
    assert trigger_matches(rule_trigger(type="github.pr_opened", base_branches=["master"]), event)
    release = rule_trigger(type="github.pr_opened", base_branches=["release/*"])
    assert trigger_matches(release, event) is False


def test_title_and_body_regex() -> None:
    event = github(OPENED)
    assert trigger_matches(rule_trigger(type="github.pr_opened", title_regex=r"^Update\b"), event)
    assert not trigger_matches(
        rule_trigger(type="github.pr_opened", title_regex=r"^\[WIP\]"), event
    )
    assert trigger_matches(rule_trigger(type="github.pr_opened", body_regex="simple change"), event)
    assert not trigger_matches(rule_trigger(type="github.pr_opened", body_regex="breaking"), event)


def test_a_missing_body_never_matches_a_body_regex() -> None:
    event = github(OPENED, body=None)
    trigger = rule_trigger(type="github.pr_opened", body_regex=".*")
    assert trigger_matches(trigger, event) is False
    assert why_not(trigger, event) == "event has no body for body_regex"


def test_draft_is_compared_when_given() -> None:
    ready, draft = github(OPENED), github(OPENED, draft=True)
    no_drafts = rule_trigger(type="github.pr_opened", draft=False)
    assert trigger_matches(no_drafts, ready) is True
    assert trigger_matches(no_drafts, draft) is False
    assert trigger_matches(rule_trigger(type="github.pr_opened"), draft) is True  # not given


def test_an_event_without_draft_never_matches_a_draft_filter() -> None:
    check_run = github("check_run/completed.payload.json")
    trigger = rule_trigger(type="github.check_run_completed", draft=False)
    assert check_run.draft is None
    assert trigger_matches(trigger, check_run) is False


def test_all_given_filters_must_match() -> None:
    trigger = rule_trigger(
        type="git.pr_opened",
        repo=HELLO,
        branches=["changes"],
        base_branches=["master"],
        labels=["bug"],
        authors=["Codertocat"],
        author_associations=["OWNER"],
        title_regex="README",
        keywords=["simple"],
        draft=False,
    )
    assert why_not(trigger, github(OPENED)) is None
    assert why_not(trigger, github(OPENED, title="Other")) == "title does not match 'README'"


def test_github_paths_need_paths_on_the_event() -> None:
    # A PR payload lists no files, so a paths filter cannot be satisfied from it
    trigger = rule_trigger(type="github.pr_opened", paths=["**"])
    assert trigger_matches(trigger, github(OPENED)) is False


# --- git and file triggers -------------------------------------------------------------------


def test_git_push_paths_are_globs_over_changed_files() -> None:
    push = github(PUSH)  # adds README.md on master
    assert trigger_matches(rule_trigger(type="git.push", paths=["*.md"]), push) is True
    src = rule_trigger(type="git.push", paths=["src/**", "docs/**"])
    assert trigger_matches(src, push) is False
    assert why_not(src, push) == "no changed path matches src/**, docs/**"


def test_a_push_without_paths_never_matches_a_paths_filter() -> None:
    tag_deleted = normalize("push", "d", load("push/payload.json"))
    trigger = rule_trigger(type="git.push", paths=["**"])
    assert trigger_matches(trigger, tag_deleted) is False


def test_git_push_repo_and_branches() -> None:
    push = github(PUSH)
    trigger = rule_trigger(type="git.push", repo=HELLO, branches=["master", "release/*"])
    assert trigger_matches(trigger, push) is True
    assert not trigger_matches(rule_trigger(type="git.push", repo="acme/api"), push)


@pytest.mark.parametrize(
    ("branch", "glob", "matches"),
    [
        ("release/1.0", "release/*", True),
        ("release/a/b", "release/*", False),
        ("release/a/b", "release/**", True),
    ],
)
def test_branch_globs_stay_within_a_segment(branch: str, glob: str, matches: bool) -> None:
    payload = load(PUSH)
    payload["ref"] = f"refs/heads/{branch}"
    push = normalize("push", "d", payload)
    assert trigger_matches(rule_trigger(type="git.push", branches=[glob]), push) is matches


def test_a_tag_push_has_no_branch_for_a_branches_filter() -> None:
    tag_deleted = normalize("push", "d", load("push/payload.json"))
    trigger = rule_trigger(type="git.push", branches=["**"])
    assert why_not(trigger, tag_deleted) == "event has no branch to match **"
    assert trigger_matches(rule_trigger(type="git.push"), tag_deleted) is True


def test_file_trigger_paths() -> None:
    event = NormalizedEvent(
        source="file",
        delivery_id="f1",
        event_key="file.changed",
        trigger_type="file.changed",
        paths=("config/rules/a.yaml", "src/app.py"),
    )
    assert trigger_matches(rule_trigger(type="file.changed", paths=["src/*.py"]), event)
    assert not trigger_matches(rule_trigger(type="file.changed", paths=["src/a/**"]), event)


# --- triggers this module cannot fully check --------------------------------------------------


def test_unknown_filters_fail_closed() -> None:
    # A webhook trigger's `hook` is not a filter here: matching would ignore which hook fired
    event = NormalizedEvent(
        source="webhook", delivery_id="w", event_key="x", trigger_type="webhook"
    )
    hook = rule_trigger(type="webhook", hook="deploy")
    assert trigger_matches(hook, event) is False
    assert why_not(hook, event) == "filter 'hook' cannot be checked against a webhook event"


def test_a_lane_trigger_without_filters_matches_its_type() -> None:
    event = NormalizedEvent(
        source="lane", delivery_id="l", event_key="lane.created", trigger_type="lane.created"
    )
    assert trigger_matches(rule_trigger(type="lane.created"), event) is True
    assert trigger_matches(rule_trigger(type="lane.created", lanes=["fix-*"]), event) is False


def test_dict_triggers_accept_a_single_string_for_a_list() -> None:
    assert trigger_matches({"type": "git.push", "branches": "master"}, github(PUSH)) is True
    assert trigger_matches({"type": "git.push", "branches": "ma"}, github(PUSH)) is False


def test_a_trigger_must_be_a_model_or_a_mapping() -> None:
    with pytest.raises(TypeError, match="trigger model or a mapping"):
        trigger_matches("github.pr_opened", github(OPENED))


def test_model_trigger_is_the_rule_models_class() -> None:
    assert isinstance(rule_trigger(type="git.pr_opened"), GithubTrigger)
