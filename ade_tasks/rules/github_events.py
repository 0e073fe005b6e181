"""The GitHub vocabulary of rule triggers: the delivery actions each `github.*` trigger type
starts on, the actions GitHub documents for the events a `github.event` trigger may name, and
the checks a GitHub trigger's `event`, `actions` and `label` pass at admission.

Kept apart from the trigger models so the ingress side (`ade_tasks.ingress.github`, which maps
a delivery to its trigger types) and rule validation read one table. A set of actions is "known"
where GitHub documents it (as of this version); for an event not listed here (a new one, or
`repository_dispatch` with its own action names) any action is accepted.
"""

from __future__ import annotations

from collections.abc import Sequence

EVENT_TRIGGER = "github.event"
LABELED_TRIGGERS = frozenset({"github.pr_labeled", "github.issue_labeled"})

#: github.* trigger type -> the delivery actions it starts on (`actions:` must pick from these).
TYPE_ACTIONS: dict[str, frozenset[str]] = {
    "github.pr_opened": frozenset({"opened", "reopened"}),
    "github.pr_updated": frozenset(
        {"synchronize", "edited", "ready_for_review", "labeled", "unlabeled"}
    ),
    "github.pr_labeled": frozenset({"labeled"}),
    "github.pr_merged": frozenset({"closed"}),
    "github.pr_closed": frozenset({"closed"}),
    "github.pr_commented": frozenset({"created"}),
    "github.pr_review_submitted": frozenset({"submitted"}),
    "github.issue_opened": frozenset({"opened"}),
    "github.issue_labeled": frozenset({"labeled"}),
    "github.issue_closed": frozenset({"closed"}),
    "github.issue_commented": frozenset({"created"}),
    "github.check_run_completed": frozenset({"completed"}),
    "github.workflow_run_completed": frozenset({"completed"}),
    "github.release_published": frozenset({"published"}),
}

_PR_ACTIONS = (
    "assigned auto_merge_disabled auto_merge_enabled closed converted_to_draft demilestoned "
    "dequeued edited enqueued labeled locked milestoned opened ready_for_review reopened "
    "review_request_removed review_requested synchronize unassigned unlabeled unlocked"
)
_ISSUE_ACTIONS = (
    "assigned closed deleted demilestoned edited labeled locked milestoned opened pinned "
    "reopened transferred typed unassigned unlabeled unlocked unpinned untyped"
)
#: GitHub event -> the actions its deliveries carry, as GitHub documents them; () for events
#: whose deliveries have no action.
EVENT_ACTIONS: dict[str, frozenset[str]] = {
    name: frozenset(actions.split())
    for name, actions in {
        "check_run": "completed created requested_action rerequested",
        "check_suite": "completed requested rerequested",
        "create": "",
        "delete": "",
        "deployment": "created",
        "deployment_review": "approved rejected requested",
        "deployment_status": "created",
        "fork": "",
        "issue_comment": "created deleted edited",
        "issues": _ISSUE_ACTIONS,
        "label": "created deleted edited",
        "merge_group": "checks_requested destroyed",
        "ping": "",
        "public": "",
        "pull_request": _PR_ACTIONS,
        "pull_request_review": "dismissed edited submitted",
        "pull_request_review_comment": "created deleted edited",
        "pull_request_review_thread": "resolved unresolved",
        "push": "",
        "release": "created deleted edited prereleased published released unpublished",
        "status": "",
        "workflow_dispatch": "",
        "workflow_job": "completed in_progress queued waiting",
        "workflow_run": "completed in_progress requested",
    }.items()
}


def check_github_trigger(
    kind: str, event: str | None, actions: Sequence[str] | None, label: Sequence[str] | None
) -> None:
    """ValueError saying what to write when a GitHub trigger's `event`, `actions` or `label`
    cannot fit its type: `event` on `github.event` only (and required there), `label` on the
    *_labeled types only, `actions` among the ones the type (or the named event) has."""
    if kind == EVENT_TRIGGER and not event:
        raise ValueError(
            "a github.event trigger needs `event:`, the GitHub event it runs on (the delivery's "
            "X-GitHub-Event), e.g. `event: check_suite`"
        )
    if kind != EVENT_TRIGGER and event:
        raise ValueError(
            f"`event` applies to github.event triggers only; {kind} runs on its own event "
            "(remove `event`, or use `type: github.event` to name any event)"
        )
    if label and kind not in LABELED_TRIGGERS:
        raise ValueError(
            f"`label` (the label just added) applies to github.pr_labeled and "
            f"github.issue_labeled only, not {kind}; use `labels` for labels the item carries"
        )
    known = TYPE_ACTIONS.get(kind) if kind != EVENT_TRIGGER else EVENT_ACTIONS.get(event or "")
    if not actions or known is None:
        return
    unknown = [action for action in actions if action not in known]
    if not unknown:
        return
    what = f"{event} deliveries" if kind == EVENT_TRIGGER else kind
    if not known:
        raise ValueError(f"{what} carry no action; remove `actions`")
    raise ValueError(
        f"unknown action(s) {', '.join(unknown)} for {what}: it runs on "
        f"{', '.join(sorted(known))}"
        + ("; for other actions use `type: github.event`" if kind != EVENT_TRIGGER else "")
    )
