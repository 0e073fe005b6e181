"""What a polled GitHub item stands for: the webhook deliveries inferred from listings.

A listing shows what an item is now, not what happened to it, so the action is inferred from
its timestamps against the window start S (the cursor the listing used):

- an issue or PR created at or after S: `issues.opened` / `pull_request.opened`
  (github.issue_opened / github.pr_opened);
- one closed at or after S: `issues.closed` / `pull_request.closed` (github.issue_closed;
  github.pr_merged when the PR's merged_at is set, else github.pr_closed);
- an open PR created before S whose head repository was pushed at or after S, and after the PR
  was opened: `pull_request.synchronize` (github.pr_updated);
- a comment created at or after S: `issue_comment.created` (github.pr_commented /
  github.issue_commented);
- from the repository's issue events (GET /repos/{repo}/issues/events), each created at or
  after S: `labeled` -> `issues.labeled` / `pull_request.labeled` (github.issue_labeled /
  github.pr_updated), `renamed` (a title edit) -> `issues.edited` / `pull_request.edited`
  (github.pr_updated; no trigger type starts on `issues.edited`, so it is not stored).

"Opened" asks only that the item was created inside the window, not that created_at equals
updated_at: a bot's comment or label seconds after a PR is opened moves updated_at, and the
opening must not be lost for it. An item opened and closed within one window yields both.

**Why labels and edits come from the issue events API.** It records each label added (with the
label, who added it and when) and each title change, so a label added and removed within one
window, or added to an item polled for the first time, is still reported, and no per-item
state has to be kept. Diffing the label sets of the issue listing would need that state and
miss both cases. An "edited" is reported only for a title change: GitHub records no event for a
body edit, and an item's updated_at also moves for assignments, reviews, review comments,
unlabeling and more, so "updated_at moved and nothing else explains it" would report edits
that never happened. Body-only edits are therefore not seen by polling.

**Delivery ids** are `poll:{repo}:{kind}-{action}:{number or comment id}:{version}`, the version
being the instant of the inferred change (created_at, closed_at), the head commit for
`synchronize`, and GitHub's own event id for `labeled` and `edited`. An item seen by two
overlapping windows, or by two pollers, therefore gets the same id and is stored once (the
intake ignores a repeated delivery id), and a change is never reported again just because the
item was updated later. That holds while the ingress log keeps the event (7 days).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from ade_tasks.ingress.event import EventSource, NormalizedEvent
from ade_tasks.ingress.github import normalize
from ade_tasks.ingress.poll_cursors import format_time, parse_time

SOURCE: EventSource = "poll"
#: Issue events turned into deliveries, and the webhook action each stands for.
EVENT_ACTIONS = {"labeled": "labeled", "renamed": "edited"}


@dataclass(frozen=True)
class PolledDelivery:
    """A webhook delivery inferred from a polled item: what `normalize` takes, and when the
    change happened (deliveries are stored in that order)."""

    event_name: str
    delivery_id: str
    payload: dict[str, object]
    at: datetime

    @property
    def action(self) -> str:
        """The inferred webhook action (`opened`, `closed`, `synchronize`, `created`,
        `labeled`, `edited`)."""
        return str(self.payload["action"])

    def normalized(self) -> NormalizedEvent:
        """The delivery as the normalized event a webhook would give, with source `poll`."""
        event = normalize(self.event_name, self.delivery_id, self.payload)
        return dataclasses.replace(event, source=SOURCE)


def is_pull(issue: Mapping[str, object]) -> bool:
    """Whether an issue listing item is a pull request."""
    return isinstance(issue.get("pull_request"), Mapping)


def issue_deliveries(
    repo: str,
    issue: Mapping[str, object],
    since: datetime,
    pull: Mapping[str, object] | None = None,
) -> list[PolledDelivery]:
    """The deliveries an issue listing item stands for, given the window start `since`.

    `pull` is the PR's details (GET /pulls/{n}); without it a PR item is described from the
    listing alone (no branches, head commit or merge state, so no `synchronize`).
    """
    number = as_int(issue.get("number"))
    if number is None:
        return []
    created, closed = time_of(issue, "created_at"), time_of(issue, "closed_at")
    if is_pull(issue):
        details = pull if pull is not None else pull_from_issue(issue)
        kind, event_name = "pr", "pull_request"
    else:
        details, kind, event_name = issue, "issue", "issues"
    found: list[tuple[str, datetime, str, object]] = []
    if created is not None and created >= since:
        found.append(("opened", created, format_time(created), issue.get("user")))
    if closed is not None and closed >= since:
        closer = details.get("merged_by") or issue.get("closed_by")
        found.append(("closed", closed, format_time(closed), closer))
    elif kind == "pr" and not found and pull is not None:
        head = _obj(pull.get("head"))
        sha = head.get("sha")
        if pull.get("state") == "open" and isinstance(sha, str) and sha:
            pushed = time_of(_obj(head.get("repo")), "pushed_at")
            if pushed is None or (pushed >= since and (created is None or pushed > created)):
                at = pushed or time_of(issue, "updated_at") or since
                found.append(("synchronize", at, sha, None))
    deliveries = []
    for action, at, version, sender in found:
        body = _pr_body(details, number) if kind == "pr" else {"issue": dict(issue)}
        payload = {"action": action, **body, "repository": _repository(repo)}
        if isinstance(sender, Mapping):
            payload["sender"] = dict(sender)
        delivery_id = f"poll:{repo.lower()}:{kind}-{action}:{number}:{version}"
        deliveries.append(PolledDelivery(event_name, delivery_id, payload, at))
    return deliveries


def comment_delivery(
    repo: str, comment: Mapping[str, object], issue: Mapping[str, object], since: datetime
) -> PolledDelivery | None:
    """The `issue_comment.created` delivery of a comment created in the window; None for an
    edit (no trigger type starts on one) or a comment GitHub described without id or times."""
    created, cid = time_of(comment, "created_at"), as_int(comment.get("id"))
    if created is None or created < since or cid is None:
        return None
    payload: dict[str, object] = {
        "action": "created",
        "issue": dict(issue),
        "comment": dict(comment),
        "repository": _repository(repo),
    }
    user = comment.get("user")
    if isinstance(user, Mapping):
        payload["sender"] = dict(user)
    delivery_id = f"poll:{repo.lower()}:comment-created:{cid}:{format_time(created)}"
    return PolledDelivery("issue_comment", delivery_id, payload, created)


def event_delivery(
    repo: str,
    event: Mapping[str, object],
    since: datetime,
    current: Mapping[str, object] | None = None,
    pull: Mapping[str, object] | None = None,
) -> PolledDelivery | None:
    """The `labeled` or `edited` delivery of an issue event created in the window; None for
    other events, older ones, or one GitHub described without id, time or issue.

    `current` is the item as this cycle's issue listing shows it (else the event's own copy)
    and `pull` a PR's details, so a PR's delivery carries its branches when they are known.
    """
    action = EVENT_ACTIONS.get(str(event.get("event")))
    created, eid = time_of(event, "created_at"), as_int(event.get("id"))
    issue = current if current is not None else _obj(event.get("issue"))
    number = as_int(issue.get("number"))
    if action is None or created is None or created < since or eid is None or number is None:
        return None
    payload: dict[str, object] = {"action": action, "repository": _repository(repo)}
    if is_pull(issue):
        kind, event_name = "pr", "pull_request"
        payload.update(_pr_body(pull if pull is not None else pull_from_issue(issue), number))
    else:
        kind, event_name = "issue", "issues"
        payload["issue"] = dict(issue)
    if action == "labeled":
        payload["label"] = {"name": _obj(event.get("label")).get("name")}
    else:
        payload["changes"] = {"title": {"from": _obj(event.get("rename")).get("from")}}
    actor = event.get("actor")
    if isinstance(actor, Mapping):
        payload["sender"] = dict(actor)
    delivery_id = f"poll:{repo.lower()}:{kind}-{action}:{number}:{eid}"
    return PolledDelivery(event_name, delivery_id, payload, created)


def comment_issue_number(comment: Mapping[str, object]) -> int | None:
    """The number of the issue or PR a comment belongs to (from its `issue_url`)."""
    url = comment.get("issue_url")
    tail = url.rstrip("/").rsplit("/", 1)[-1] if isinstance(url, str) else ""
    return int(tail) if tail.isdigit() else None


def _pr_body(pull: Mapping[str, object], number: int) -> dict[str, object]:
    return {"number": number, "pull_request": dict(pull)}


def pull_from_issue(issue: Mapping[str, object]) -> dict[str, object]:
    """A PR's details as far as its issue listing item tells them (no branches or head)."""
    merged_at = _obj(issue.get("pull_request")).get("merged_at")
    fields = ("number", "title", "body", "user", "labels", "state", "draft", "html_url")
    return {
        **{name: issue[name] for name in fields if name in issue},
        "author_association": issue.get("author_association"),
        "merged_at": merged_at,
    }


def _repository(repo: str) -> dict[str, object]:
    owner, name = repo.split("/", 1)
    return {"full_name": repo, "name": name, "owner": {"login": owner}}


def _obj(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def as_int(value: object) -> int | None:
    """`value` if it is an int (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def time_of(item: Mapping[str, object], key: str) -> datetime | None:
    """The instant `item[key]` names, or None when it is missing or not a time."""
    value = item.get(key)
    if not isinstance(value, str):
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None  # GitHub's data is read defensively, as webhook bodies are
