"""GitHub webhook deliveries (`X-GitHub-Event`, `X-GitHub-Delivery`, JSON body) as NormalizedEvents.

Which delivery becomes which trigger type:

| event | action | trigger type |
|---|---|---|
| pull_request | opened, reopened | github.pr_opened |
| pull_request | synchronize, edited, ready_for_review, labeled, unlabeled | github.pr_updated |
| pull_request | closed (merged / not merged) | github.pr_merged / github.pr_closed |
| pull_request_review | submitted | github.pr_review_submitted |
| issue_comment | created (on a PR / on an issue) | github.pr_commented / github.issue_commented |
| issues | opened, labeled, closed | github.issue_opened, _labeled, _closed |
| push | (none) | git.push (tag pushes and deletions too; their `branch` is None) |
| check_run / workflow_run | completed | github.check_run_completed / _workflow_run_completed |
| release | published | github.release_published |

Everything else (`ping`, other actions, unknown events) keeps its `event_key` and has no trigger
type of its own. The payload is untrusted: a field that is missing or of the wrong type becomes
None (or empty) instead of an error.

**What else a delivery starts** (`trigger_types`): a `pull_request.labeled` is also
`github.pr_labeled`, and every delivery (a ping too) is a `github.event` whose `event:` filter
names its X-GitHub-Event. Every event carries its `event`, `action`, `sender` and, for
`labeled` / `unlabeled`, the `label` added or removed. An event without a handler of its own
(check_suite, deployment_status, pull_request_review_comment, ...) takes what the usual filters
read from the objects it has (`pull_request`, `issue`, `comment`, a check suite's or
deployment's branch and sha) and keeps its own objects as `data` (see `delivery_data`), so a
`github.event` run can read `{{trigger.data.check_suite.conclusion}}`.

**The engine's own identity** (`own_identity`): when an event is matched, a delivery whose
`sender` is one of the engine's GitHub logins (`ADE_GITHUB__BOT_LOGINS`) is marked `by_engine`,
and the trigger filters refuse it unless the trigger says `include_own: true`, so an agent's
push or comment does not start its own rule again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from ade_tasks.ingress.event import NormalizedEvent
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.github_events import EVENT_TRIGGER
from ade_tasks.rules.triggers import TriggerType

_ZERO_SHA = frozenset({"0" * 40, "0" * 64})

_PR_ACTIONS = {
    "opened": TriggerType.GITHUB_PR_OPENED,
    "reopened": TriggerType.GITHUB_PR_OPENED,
    "synchronize": TriggerType.GITHUB_PR_UPDATED,
    "edited": TriggerType.GITHUB_PR_UPDATED,
    "ready_for_review": TriggerType.GITHUB_PR_UPDATED,
    "labeled": TriggerType.GITHUB_PR_UPDATED,
    "unlabeled": TriggerType.GITHUB_PR_UPDATED,
}
_ISSUE_ACTIONS = {
    "opened": TriggerType.GITHUB_ISSUE_OPENED,
    "labeled": TriggerType.GITHUB_ISSUE_LABELED,
    "closed": TriggerType.GITHUB_ISSUE_CLOSED,
}
# How an action reads in a summary when its wire name does not.
_VERBS = {"synchronize": "updated", "ready_for_review": "marked ready for review"}

Fields = JsonObject


def normalize(event_name: str, delivery_id: str, payload: Mapping[str, object]) -> NormalizedEvent:
    """One GitHub delivery as a NormalizedEvent; ValueError if the body is not a JSON object."""
    if not isinstance(payload, Mapping):
        raise ValueError(
            f"GitHub delivery {delivery_id!r} ({event_name}): the body must be a JSON object, "
            f"not {type(payload).__name__}; send the webhook with content type application/json"
        )
    event = event_name.strip().lower()
    if not event:
        raise ValueError(
            f"GitHub delivery {delivery_id!r} has no event name; is the X-GitHub-Event header set?"
        )
    if not delivery_id.strip():
        # The delivery id is the run's idempotency key: without it redeliveries would run twice.
        raise ValueError(
            f"GitHub {event} delivery has no delivery id; is the X-GitHub-Delivery header set?"
        )
    action = _str(payload.get("action"))
    key = f"{event}.{action}" if action else event
    sender = _login(payload.get("sender"))
    repository = _obj(payload.get("repository"))
    repo = _repo_name(repository)
    fields: Fields = {
        "repo": repo,
        "author": sender,
        "url": _str(repository.get("html_url")),
        "summary": f"GitHub {key} by {sender or 'someone'} in {repo or '?'}",
    }
    handler = _HANDLERS.get(event)
    if handler is None:
        fields.update(_other(payload, key, sender or "someone", repo or "?"))
    else:
        fields.update(handler(payload, action or "", sender or "someone", repo or "?"))
    trigger: TriggerType | None = fields.pop("trigger_type", None)
    label = _str(_obj(payload.get("label")).get("name"))
    return NormalizedEvent(
        source="github",
        delivery_id=delivery_id.strip(),
        event_key=key,
        trigger_type=trigger.value if trigger is not None else None,
        event=event,
        action=action,
        label=label if action in ("labeled", "unlabeled") else None,
        sender=sender,
        **fields,
    )


#: Deliveries that also start another trigger type than their own: (event_key -> types).
_ALSO_STARTS = {"pull_request.labeled": (TriggerType.GITHUB_PR_LABELED.value,)}
#: The sources whose events are GitHub deliveries (received, relayed, or inferred by polling).
GITHUB_SOURCES = frozenset({"github", "poll"})


def trigger_types(event: NormalizedEvent) -> tuple[str, ...]:
    """Every trigger type `event` starts, its own first: a GitHub delivery also starts the
    types its action stands for (`pull_request.labeled`: github.pr_labeled) and `github.event`;
    an event from another source starts its own type only."""
    own = (event.trigger_type,) if event.trigger_type else ()
    if event.source not in GITHUB_SOURCES:
        return own
    return (*own, *_ALSO_STARTS.get(event.event_key, ()), EVENT_TRIGGER)


def own_identity(payload: Mapping[str, Any], logins: Collection[str]) -> JsonObject:
    """A GitHub event's payload marked `by_engine`: whether its sender is one of `logins`
    (the engine's own GitHub identities, compared case-insensitively)."""
    sender = payload.get("sender")
    own = {login.casefold() for login in logins}
    return {**payload, "by_engine": isinstance(sender, str) and sender.casefold() in own}


# --- payload access: never raises on a missing or mistyped field -----------------------------


def _obj(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _bool(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _login(user: object) -> str | None:
    return _str(_obj(user).get("login"))


def _repo_name(repository: Mapping[str, object]) -> str | None:
    full_name = _str(repository.get("full_name"))
    if full_name:
        return full_name
    owner, name = _login(repository.get("owner")), _str(repository.get("name"))
    return f"{owner}/{name}" if owner and name else None


def _labels(items: object) -> tuple[str, ...]:
    names = (_str(_obj(item).get("name")) for item in _list(items))
    return tuple(dict.fromkeys(name for name in names if name))


def _unique_sorted(values: Iterable[object]) -> tuple[str, ...]:
    return tuple(sorted({value for value in values if isinstance(value, str) and value}))


def _first_line(text: str | None) -> str | None:
    return text.strip().splitlines()[0] if text and text.strip() else None


def _verb(action: str) -> str:
    return _VERBS.get(action, action)


def _label_note(payload: Mapping[str, object], action: str) -> str:
    label = _str(_obj(payload.get("label")).get("name"))
    return f' "{label}"' if label and action in ("labeled", "unlabeled") else ""


# --- one handler per event: the fields it knows, the trigger type when the action has one ----


def _pull_request(payload: Mapping[str, object], action: str, sender: str, repo: str) -> Fields:
    pr = _obj(payload.get("pull_request"))
    merged = _bool(pr.get("merged"))
    if merged is None and "merged_at" in pr:  # trimmed payloads may carry only the timestamp
        merged = pr["merged_at"] is not None
    trigger = _PR_ACTIONS.get(action)
    verb = _verb(action)
    if action == "closed":
        trigger = TriggerType.GITHUB_PR_MERGED if merged else TriggerType.GITHUB_PR_CLOSED
        verb = "merged" if merged else "closed"
    fields = _pr_fields(pr, payload)
    fields.update(
        trigger_type=trigger,
        merged=merged,
        summary=f"PR #{_num(fields)} {verb}{_label_note(payload, action)} by {sender} in {repo}: "
        f"{fields['title'] or ''}",
    )
    return fields


def _pr_fields(pr: Mapping[str, object], payload: Mapping[str, object]) -> Fields:
    head, base = _obj(pr.get("head")), _obj(pr.get("base"))
    return {
        "number": _int(pr.get("number")) or _int(payload.get("number")),
        "title": _str(pr.get("title")),
        "body": _str(pr.get("body")),
        # The PR's author, not whoever labeled or pushed: author filters mean "PRs by ...".
        "author": _login(pr.get("user")) or _login(payload.get("sender")),
        "author_association": _str(pr.get("author_association")),
        "labels": _labels(pr.get("labels")),
        "draft": _bool(pr.get("draft")),
        "branch": _str(head.get("ref")),
        "base": _str(base.get("ref")),
        "head_sha": _str(head.get("sha")),
        "url": _str(pr.get("html_url")),
    }


def _pull_request_review(
    payload: Mapping[str, object], action: str, sender: str, repo: str
) -> Fields:
    pr, review = _obj(payload.get("pull_request")), _obj(payload.get("review"))
    fields = _pr_fields(pr, payload)
    state = (_str(review.get("state")) or "").lower().replace("_", " ")
    fields.update(
        trigger_type=TriggerType.GITHUB_PR_REVIEW_SUBMITTED if action == "submitted" else None,
        body=_str(review.get("body")),
        author=_login(review.get("user")) or _login(payload.get("sender")),
        author_association=_str(review.get("author_association")),
        url=_str(review.get("html_url")) or fields["url"],
        summary=f"Review{f' ({state})' if state else ''} {action} by {sender} on PR "
        f"#{_num(fields)} in {repo}: {fields['title'] or ''}",
    )
    return fields


def _issue_fields(issue: Mapping[str, object], payload: Mapping[str, object]) -> Fields:
    return {
        "number": _int(issue.get("number")),
        "title": _str(issue.get("title")),
        "body": _str(issue.get("body")),
        "author": _login(issue.get("user")) or _login(payload.get("sender")),
        "author_association": _str(issue.get("author_association")),
        "labels": _labels(issue.get("labels")),
        "draft": _bool(issue.get("draft")),
        "url": _str(issue.get("html_url")),
    }


def _issues(payload: Mapping[str, object], action: str, sender: str, repo: str) -> Fields:
    fields = _issue_fields(_obj(payload.get("issue")), payload)
    fields.update(
        trigger_type=_ISSUE_ACTIONS.get(action),
        summary=f"Issue #{_num(fields)} {_verb(action)}{_label_note(payload, action)} by "
        f"{sender} in {repo}: {fields['title'] or ''}",
    )
    return fields


def _issue_comment(payload: Mapping[str, object], action: str, sender: str, repo: str) -> Fields:
    issue, comment = _obj(payload.get("issue")), _obj(payload.get("comment"))
    on_pr = "pull_request" in issue  # GitHub models a PR's conversation as an issue
    fields = _issue_fields(issue, payload)
    trigger = None
    if action == "created":
        trigger = TriggerType.GITHUB_PR_COMMENTED if on_pr else TriggerType.GITHUB_ISSUE_COMMENTED
    author = _login(comment.get("user")) or _login(payload.get("sender"))
    fields.update(
        trigger_type=trigger,
        body=_str(comment.get("body")),
        author=author,
        author_association=_str(comment.get("author_association")),
        url=_str(comment.get("html_url")) or fields["url"],
        summary=f"Comment {action} by {author or sender} on {'PR' if on_pr else 'issue'} "
        f"#{_num(fields)} in {repo}: {fields['title'] or ''}",
    )
    return fields


def _push(payload: Mapping[str, object], _action: str, sender: str, repo: str) -> Fields:
    ref = _str(payload.get("ref")) or ""
    branch = ref.removeprefix("refs/heads/") if ref.startswith("refs/heads/") else None
    tag = ref.removeprefix("refs/tags/") if ref.startswith("refs/tags/") else None
    after = _str(payload.get("after"))
    deleted = payload.get("deleted") is True or after in _ZERO_SHA
    commits = [_obj(c) for c in _list(payload.get("commits"))]
    head_commit = _obj(payload.get("head_commit"))
    changed = (
        path
        for commit in [*commits, head_commit]
        for key in ("added", "modified", "removed")
        for path in _list(commit.get(key))
    )
    what = f"branch {branch}" if branch else f"tag {tag}" if tag else ref or "a ref"
    count = len(commits)
    happened = (
        f"Deleted {what}" if deleted else f"Push to {what} ({count} commit{'s' * (count != 1)})"
    )
    title = _first_line(_str(head_commit.get("message")))
    return {
        "trigger_type": TriggerType.GIT_PUSH,
        "branch": branch,
        # `sender` is always a login; `pusher.name` is the login too, but only when a user pushed.
        "author": _login(payload.get("sender")) or _str(_obj(payload.get("pusher")).get("name")),
        "head_sha": None if deleted else after,
        "url": _str(payload.get("compare")) or _str(head_commit.get("url")),
        "title": title,
        "paths": _unique_sorted(changed),
        "summary": f"{happened} by {sender} in {repo}" + (f": {title}" if title else ""),
    }


def _check_run(payload: Mapping[str, object], action: str, _sender: str, repo: str) -> Fields:
    run = _obj(payload.get("check_run"))
    pr = _obj(next(iter(_list(run.get("pull_requests"))), None))
    branch = _str(_obj(run.get("check_suite")).get("head_branch"))
    name = _str(run.get("name"))
    conclusion = _str(run.get("conclusion"))
    return {
        "trigger_type": TriggerType.GITHUB_CHECK_RUN_COMPLETED if action == "completed" else None,
        "title": name,
        "body": _str(_obj(run.get("output")).get("summary")),
        "number": _int(pr.get("number")),
        "branch": branch or _str(_obj(pr.get("head")).get("ref")),
        "base": _str(_obj(pr.get("base")).get("ref")),
        "head_sha": _str(run.get("head_sha")),
        "url": _str(run.get("html_url")),
        "summary": f"Check run {name or '?'} {action}"
        + (f" ({conclusion})" if conclusion else "")
        + f" in {repo}"
        + (f" on {branch}" if branch else ""),
    }


def _workflow_run(payload: Mapping[str, object], action: str, _sender: str, repo: str) -> Fields:
    run = _obj(payload.get("workflow_run"))
    pr = _obj(next(iter(_list(run.get("pull_requests"))), None))
    # `workflow_run.name` may be empty (it is in GitHub's own example); the workflow's is not.
    name = _str(run.get("name")) or _str(_obj(payload.get("workflow")).get("name"))
    conclusion = _str(run.get("conclusion"))
    display = _str(run.get("display_title"))
    return {
        "trigger_type": (
            TriggerType.GITHUB_WORKFLOW_RUN_COMPLETED if action == "completed" else None
        ),
        "title": name,
        "body": display,
        "number": _int(pr.get("number")),
        "branch": _str(run.get("head_branch")),
        "base": _str(_obj(pr.get("base")).get("ref")),
        "head_sha": _str(run.get("head_sha")),
        "url": _str(run.get("html_url")),
        "summary": f"Workflow {name or '?'} {action}"
        + (f" ({conclusion})" if conclusion else "")
        + f" in {repo}"
        + (f": {display}" if display else ""),
    }


def _release(payload: Mapping[str, object], action: str, sender: str, repo: str) -> Fields:
    release = _obj(payload.get("release"))
    tag = _str(release.get("tag_name"))
    name = _str(release.get("name"))
    return {
        "trigger_type": TriggerType.GITHUB_RELEASE_PUBLISHED if action == "published" else None,
        "title": name or tag,
        "body": _str(release.get("body")),
        "author": _login(release.get("author")) or _login(payload.get("sender")),
        "draft": _bool(release.get("draft")),
        "url": _str(release.get("html_url")),
        "summary": f"Release {tag or '?'} {action} by {sender} in {repo}"
        + (f": {name}" if name and name != tag else ""),
    }


def _ping(payload: Mapping[str, object], _action: str, _sender: str, _repo: str) -> Fields:
    zen = _str(payload.get("zen"))
    hook = _int(payload.get("hook_id"))
    return {
        "summary": "Ping from GitHub"
        + (f" (hook {hook})" if hook is not None else "")
        + (f": {zen}" if zen else ""),
    }


#: Top-level objects of a delivery that describe where it came from rather than what happened;
#: `repo` and `sender` already say what a rule needs of them.
_CONTEXT_KEYS = frozenset({"repository", "organization", "installation", "enterprise", "sender"})
DATA_KEY_MAX = 32 * 1024  # bytes of JSON one top-level value of `data` may take
DATA_MAX = 64 * 1024  # bytes of JSON all of `data` may take


def delivery_data(payload: Mapping[str, object]) -> JsonObject:
    """The delivery's own top-level values (not `repository`, `organization`, `installation`,
    `enterprise`, `sender`), each at most DATA_KEY_MAX bytes of JSON and all at most DATA_MAX,
    in the delivery's order; a value past either bound is replaced by `"(left out: N bytes)"`,
    so a run sees that it existed."""
    data: JsonObject = {}
    total = 0
    for key, value in payload.items():
        if key in _CONTEXT_KEYS:
            continue
        size = len(json.dumps(value, separators=(",", ":")))
        if size > DATA_KEY_MAX or total + size > DATA_MAX:
            data[key] = f"(left out: {size} bytes)"
            continue
        data[key] = value
        total += size
    return data


def _other(payload: Mapping[str, object], key: str, sender: str, repo: str) -> Fields:
    """An event without a handler of its own (only `github.event` starts on it): the fields the
    usual filters read, where its objects have them, and its own objects as `data`."""
    pr, issue = _obj(payload.get("pull_request")), _obj(payload.get("issue"))
    fields: Fields = (
        _pr_fields(pr, payload) if pr else _issue_fields(issue, payload) if issue else {}
    )
    for name in ("check_suite", "workflow_job", "deployment", "merge_group"):
        found = _obj(payload.get(name))
        ref = _str(found.get("head_branch")) or _str(found.get("head_ref")) or ""
        ref = ref or _str(found.get("ref")) or ""
        if ref and not fields.get("branch"):
            fields["branch"] = ref.removeprefix("refs/heads/")
        sha = _str(found.get("head_sha")) or _str(found.get("sha"))
        if sha and not fields.get("head_sha"):
            fields["head_sha"] = sha
        first_pr = _obj(next(iter(_list(found.get("pull_requests"))), None))
        if first_pr and fields.get("number") is None:
            fields["number"] = _int(first_pr.get("number"))
    comment = _obj(payload.get("comment"))
    if comment:
        fields.update(
            body=_str(comment.get("body")),
            author=_login(comment.get("user")) or sender,
            author_association=_str(comment.get("author_association")),
            url=_str(comment.get("html_url")) or fields.get("url"),
        )
    if fields.get("url") is None:
        fields.pop("url", None)  # keep the repository's
    on = f" on #{fields['number']}" if fields.get("number") is not None else ""
    title = fields.get("title")
    fields["summary"] = f"GitHub {key} by {sender} in {repo}{on}" + (f": {title}" if title else "")
    fields["data"] = delivery_data(payload)
    return fields


def _num(fields: Fields) -> str:
    number = fields.get("number")
    return str(number) if number is not None else "?"


_HANDLERS: dict[str, Callable[[Mapping[str, object], str, str, str], Fields]] = {
    "pull_request": _pull_request,
    "pull_request_review": _pull_request_review,
    "issues": _issues,
    "issue_comment": _issue_comment,
    "push": _push,
    "check_run": _check_run,
    "workflow_run": _workflow_run,
    "release": _release,
    "ping": _ping,
}
