"""Publishing a finished run per its rule's disposition, as the run's last step (`publish`).

- `comment-only`: one comment on the triggering GitHub PR or issue (API base URL from
  `ADE_GITHUB__API_URL`, so GitHub Enterprise works); a run whose trigger names no PR or issue,
  or a cluster without `ADE_GITHUB__TOKEN`, keeps the result in the run log.
- `open-pr`: commits what the steps left uncommitted in the run's lane, pushes the lane's
  branch and opens a draft PR (or updates the one already open from that branch). Only a
  succeeded run opens a PR.
- `notify`: a Slack-compatible incoming webhook, its URL a secret (`${env:NAME}`).

Every side effect carries a marker with the run id and step id: a retried run finds and updates
its earlier comment or PR instead of posting twice.
"""

from __future__ import annotations

from ade_tasks.errors import AdeError
from ade_tasks.json_document import JsonObject
from ade_tasks.retry import RetryPolicy
from ade_tasks.rules.outputs import Disposition
from ade_tasks.rules.rule import Rule
from ade_tasks.secrets import resolve
from ade_tasks.settings import Settings
from ade_tasks.states import RunStatus, StepStatus
from ade_tasks.templating import render
from ade_workers.actions.executor import StepContext, StepOutcome
from ade_workers.engine.chain import ChainState, template_context
from ade_workers.integrations import git_lanes as lanes
from ade_workers.integrations.github import GithubClient
from ade_workers.integrations.notify import send_notification

MAX_FINDINGS_SHOWN = 20
COMMITTER = ("-c", "user.name=ADE Tasks", "-c", "user.email=ade-tasks@localhost")


def publish(
    rule: Rule, status: RunStatus, state: ChainState, context: StepContext, settings: Settings
) -> StepOutcome:
    """Publish the run's result; a failure to publish fails this step (and so the run)."""
    outputs = rule.outputs
    policy = RetryPolicy(attempts=outputs.retry)
    marker = f"run={context.run_id} step=publish"
    text = summary(rule, status, state, context.run_id, settings.effective_api_url)
    try:
        if outputs.disposition is Disposition.COMMENT_ONLY:
            return _comment(context, settings, policy, text, marker)
        if outputs.disposition is Disposition.NOTIFY:
            assert outputs.notify_url is not None  # the model requires it for notify
            url, _ = resolve(outputs.notify_url, context.base_env, f"rule {rule.id!r} notify_url")
            send_notification(url, text, marker=marker, policy=policy)
            return StepOutcome(StepStatus.SUCCEEDED, output=text, result={"published": "notify"})
        if outputs.disposition is Disposition.OPEN_PR:
            return _open_pr(rule, status, state, context, settings, policy, text, marker)
    except AdeError as exc:
        return StepOutcome(
            StepStatus.FAILED,
            output=text,
            error=f"publishing ({outputs.disposition}): {exc.message}",
        )
    return StepOutcome(StepStatus.SUCCEEDED, output=text, result={"published": "run-log"})


def summary(rule: Rule, status: RunStatus, state: ChainState, run_id: str, api_url: str) -> str:
    """The run's result in Markdown: outcome, steps, findings, and where to read more."""
    lines = [f"**ADE Tasks** · rule `{rule.id}` ({rule.name}) · run `{run_id}`: **{status}**", ""]
    for step_id, report in state.steps.items():
        lines.append(f"- `{step_id}`: {report['status']}")
    if state.findings:
        lines += ["", f"**Findings ({len(state.findings)})**"]
        for finding in state.findings[:MAX_FINDINGS_SHOWN]:
            where = finding.get("path") or finding.get("test_id") or ""
            lines.append(f"- {finding.get('severity', 'info')}: {where} {finding.get('message')}")
        if len(state.findings) > MAX_FINDINGS_SHOWN:
            lines.append(f"- ... and {len(state.findings) - MAX_FINDINGS_SHOWN} more")
    lines += ["", f"Details: {api_url}/api/v1/runs/{run_id}"]
    return "\n".join(lines)


def _comment(
    context: StepContext,
    settings: Settings,
    policy: RetryPolicy,
    text: str,
    marker: str,
) -> StepOutcome:
    repo, number = context.trigger.get("repo"), context.trigger.get("number")
    if not (isinstance(repo, str) and isinstance(number, int)):
        return _run_log(text, "the trigger names no GitHub pull request or issue")
    if settings.github.token is None:
        return _run_log(text, "ADE_GITHUB__TOKEN is not set, so nothing was posted to GitHub")
    with GithubClient.from_settings(settings.github, policy=policy) as client:
        comment = client.upsert_comment(repo, number, text, marker)
    result = {"published": "comment", "url": comment.url, "created": comment.created}
    return StepOutcome(StepStatus.SUCCEEDED, output=text, result=result)


def _open_pr(
    rule: Rule,
    status: RunStatus,
    state: ChainState,
    context: StepContext,
    settings: Settings,
    policy: RetryPolicy,
    text: str,
    marker: str,
) -> StepOutcome:
    outputs = rule.outputs
    if status is not RunStatus.SUCCEEDED:
        return _run_log(text, f"the run {status}, so no pull request was opened")
    lane = state.lane
    if lane is None:
        raise AdeError("open-pr needs a lane: add a create-lane step that makes the changes")
    repo = outputs.repo or context.trigger.get("repo")
    if not isinstance(repo, str):
        raise AdeError(f"rule {rule.id!r}: set outputs.repo (owner/name) to open a pull request")
    base = outputs.pr_base or lane.base_ref
    if not base or base == "HEAD":
        raise AdeError(f"rule {rule.id!r}: set outputs.pr_base, the branch the PR merges into")
    if settings.github.token is None:
        raise AdeError("ADE_GITHUB__TOKEN is not set; a pull request needs a GitHub token")
    if lanes.git(lane.path, "status", "--porcelain").strip():
        lanes.git(lane.path, "add", "-A")
        message = f"{rule.name}\n\nADE Tasks run {context.run_id}"
        lanes.git(lane.path, *COMMITTER, "commit", "-q", "-m", message)
    lanes.git(lane.path, "push", "--force-with-lease", outputs.remote, f"HEAD:{lane.branch}")
    title = render(outputs.pr_title, template_context(rule, context.trigger, state), "pr_title")
    with GithubClient.from_settings(settings.github, policy=policy) as client:
        pull = client.open_draft_pr(repo, lane.branch, base, title, text, marker)
    result: JsonObject = {"published": "pull-request", "url": pull.url, "created": pull.created}
    return StepOutcome(StepStatus.SUCCEEDED, output=text, result=result)


def _run_log(text: str, why: str) -> StepOutcome:
    return StepOutcome(
        StepStatus.SUCCEEDED, output=text, result={"published": "run-log", "reason": why}
    )
