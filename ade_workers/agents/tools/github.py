"""The `github` palette: tools the worker runs on the run's pull request with the cluster's
GitHub token, which the agent never sees.

The pull request is the one the run's trigger names (`RunLink.repo` / `.number`); the agent
names no numbers and reaches no other pull request (a thread id must belong to it). A run
whose trigger names none gets a tool error saying so; only `github_open_pr` works without
one (it opens a draft PR from the lane in the trigger's or the rule's repository).

Reads (`github_pr`, `github_threads`, `github_checks`) are capped: a diff hunk at 2,000
characters, a comment at 1,000, a failed job's log tail at 3,000. Writes mark what they post
with the run and call id (`<!-- ade:run=R call=C -->`) and look for that marker first, so a
resumed session, or a CLI repeating a call, never posts twice (`RESUMABLE_TOOLS` run again
after a crash instead of being reported unknown). `github_push` pushes the lane's HEAD to the
PR's head branch only when that branch lives in the same repository (never a fork's), is
not protected, and only as a fast-forward: a branch that moved is refused, never forced.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager

from ade_tasks.errors import AdeError
from ade_tasks.json_document import JsonObject
from ade_tasks.retry import RetryPolicy
from ade_workers.agents.tools.tool import (
    STRING,
    RunLink,
    Tool,
    ToolContext,
    ToolError,
    ToolResult,
    ToolSpec,
    spec,
)
from ade_workers.integrations import github_push as pushing
from ade_workers.integrations.github_review import ReviewClient

HUNK_CAP = 2_000
"""Characters of one diff hunk `github_pr` shows."""
COMMENT_CAP = 1_000
BODY_CAP = 4_000
LOG_TAIL_CAP = 3_000
"""Characters of the end of a failed job's log `github_checks` shows."""
LOGGED_CHECKS = 5
"""Failed checks whose logs one `github_checks` call reads."""
#: A GitHub call of a tool waits at most this long (and never past the session's deadline).
CALL_BUDGET_SEC = 120.0
POLICY = RetryPolicy(attempts=3)
FAILED = frozenset({"failure", "timed_out", "cancelled", "action_required", "startup_failure"})
RESUMABLE_TOOLS = frozenset(
    {"github_comment", "github_reply", "github_resolve", "github_push", "github_open_pr"}
)
"""Writes that find their own earlier effect, so a resumed session runs them again."""
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+Z ", re.MULTILINE)


def _link(ctx: ToolContext) -> RunLink:
    if ctx.run is None:
        raise ToolError("this session has no GitHub access (the engine gave it no run link)")
    if ctx.run.github.token is None:
        raise ToolError(
            "the cluster has no GitHub token (ADE_GITHUB__TOKEN is unset), so no GitHub tool "
            "can run; report this to the operator"
        )
    return ctx.run


def _pull_request(link: RunLink) -> tuple[str, int]:
    if link.repo is None or link.number is None:
        raise ToolError(
            "this run's trigger names no pull request, so there is none to act on; the github "
            "tools act on the triggering pull request only (github_open_pr can open one)"
        )
    return link.repo, link.number


def _marker(link: RunLink, ctx: ToolContext) -> str:
    return f"run={link.run_id} call={ctx.call_id or 'none'}"


@contextmanager
def _github(ctx: ToolContext) -> Iterator[tuple[ReviewClient, RunLink, float]]:
    """A client with the cluster's token, the run link and the call's deadline; GitHub's
    refusals become tool errors the model reads."""
    link = _link(ctx)
    assert link.github.token is not None  # checked by _link
    deadline = time.monotonic() + max(min(ctx.time_left(), CALL_BUDGET_SEC), 0.0)
    client = ReviewClient(
        base_url=link.github.api_url, token=link.github.token.get_secret_value(), policy=POLICY
    )
    try:
        yield client, link, deadline
    except AdeError as exc:
        raise ToolError(f"GitHub: {exc.message}") from None
    finally:
        client.close()


# --- reads ------------------------------------------------------------------------------------


def github_pr(args: JsonObject, ctx: ToolContext) -> ToolResult:
    """The pull request: title, branches, body, and its changed files with capped hunks."""
    with _github(ctx) as (client, link, deadline):
        repo, number = _pull_request(link)
        pull = client.get_pull(repo, number, deadline=deadline)
        files = client.pull_files(repo, number, deadline=deadline)
    only = args.get("path")
    head, base = pull.get("head") or {}, pull.get("base") or {}
    lines = [
        f"PR {repo}#{number}: {pull.get('title')} ({pull.get('state')}"
        f"{', draft' if pull.get('draft') else ''}) by {(pull.get('user') or {}).get('login')}",
        f"{head.get('label') or head.get('ref')} -> {base.get('ref')}, head {head.get('sha')}",
        str(pull.get("html_url") or ""),
        "",
        _cap(str(pull.get("body") or "(no description)"), BODY_CAP),
        "",
        f"Changed files ({len(files)}):",
    ]
    for item in files:
        name = str(item.get("filename"))
        lines.append(
            f"- {name} ({item.get('status')}, +{item.get('additions')} -{item.get('deletions')})"
        )
        if only is not None and name != only:
            continue
        patch = item.get("patch")
        if isinstance(patch, str):
            lines += [_cap(hunk, HUNK_CAP) for hunk in _hunks(patch)]
        else:
            lines.append("  (no patch: binary or too large for GitHub to show)")
    data = {
        "repo": repo,
        "number": number,
        "head_sha": head.get("sha"),
        "files": [item.get("filename") for item in files],
    }
    return ToolResult(True, "\n".join(lines), data)


def github_threads(args: JsonObject, ctx: ToolContext) -> ToolResult:
    """The PR's review threads (unresolved by default), each with its comments."""
    state = args.get("state", "unresolved")
    if state not in ("unresolved", "all"):
        raise ToolError("state must be 'unresolved' or 'all'")
    with _github(ctx) as (client, link, deadline):
        repo, number = _pull_request(link)
        threads = client.review_threads(repo, number, deadline=deadline)
    shown = [t for t in threads if state == "all" or not t.get("isResolved")]
    lines = [
        f"{len(shown)} {'' if state == 'all' else 'unresolved '}review threads on PR #{number}"
    ]
    for thread in shown:
        flags = [f for f in ("resolved", "outdated") if thread.get(f"is{f.title()}")]
        where = f"{thread.get('path')}:{thread.get('line')}" if thread.get("path") else ""
        note = f" [{', '.join(flags)}]" if flags else ""
        lines += ["", f"thread {thread.get('id')} {where}{note}"]
        for comment in (thread.get("comments") or {}).get("nodes") or []:
            author = (comment.get("author") or {}).get("login")
            lines.append(f"  @{author}: {_cap(str(comment.get('body') or ''), COMMENT_CAP)}")
    data = {"threads": [{"id": t.get("id"), "resolved": t.get("isResolved")} for t in shown]}
    return ToolResult(True, "\n".join(lines), data)


def github_checks(_args: JsonObject, ctx: ToolContext) -> ToolResult:
    """The PR head's check runs; for failed ones, the failed steps and the log's tail."""
    with _github(ctx) as (client, link, deadline):
        repo, number = _pull_request(link)
        sha = str((client.get_pull(repo, number, deadline=deadline).get("head") or {})["sha"])
        runs = client.check_runs(repo, sha, deadline=deadline)
        failed = [run for run in runs if run.get("conclusion") in FAILED]
        lines = [f"{len(runs)} check runs on {sha[:12]} (PR #{number}), {len(failed)} failed:"]
        lines += [
            f"- {run.get('name')}: {run.get('conclusion') or run.get('status')}" for run in runs
        ]
        for run in failed[:LOGGED_CHECKS]:
            lines += ["", *_failure(client, repo, run, deadline)]
    data = {
        "head_sha": sha,
        "checks": [{"name": r.get("name"), "conclusion": r.get("conclusion")} for r in runs],
    }
    return ToolResult(True, "\n".join(lines), data)


def _failure(client: ReviewClient, repo: str, run: JsonObject, deadline: float) -> list[str]:
    """What a failed check run says: its failed steps and the tail of its job's log, or its
    output when it is not an Actions job."""
    lines = [f"## {run.get('name')} ({run.get('conclusion')})"]
    job = client.actions_job(repo, int(run["id"]), deadline=deadline)
    steps = (job or {}).get("steps") or []
    bad = [str(s.get("name")) for s in steps if s.get("conclusion") in FAILED]
    if bad:
        lines.append(f"failed steps: {', '.join(bad)}")
    log = client.job_log(repo, int(run["id"]), deadline=deadline) if job else None
    if log:
        tail = _TIMESTAMP.sub("", log)[-LOG_TAIL_CAP:]
        lines += [f"log tail ({LOG_TAIL_CAP} characters at most):", tail.rstrip()]
    else:
        output = run.get("output") or {}
        text = "\n".join(str(output.get(k) or "") for k in ("title", "summary", "text")).strip()
        lines.append(_cap(text, LOG_TAIL_CAP) if text else "(no log or output available)")
    return lines


# --- writes -----------------------------------------------------------------------------------


def github_comment(args: JsonObject, ctx: ToolContext) -> ToolResult:
    """Comment on the PR (a repeated call updates its own comment instead of adding one)."""
    body = _text(args, "body")
    with _github(ctx) as (client, link, deadline):
        repo, number = _pull_request(link)
        comment = client.upsert_comment(repo, number, body, _marker(link, ctx), deadline=deadline)
    verb = "commented on" if comment.created else "already commented (updated) on"
    data = {"url": comment.url, "created": comment.created}
    return ToolResult(True, f"{verb} PR #{number}: {comment.url}", data)


def github_reply(args: JsonObject, ctx: ToolContext) -> ToolResult:
    """Reply to one of the PR's review threads."""
    body = _text(args, "body")
    with _github(ctx) as (client, link, deadline):
        thread_id = _own_thread(client, link, str(args["thread_id"]), deadline)
        reply, posted = client.reply_to_thread(
            thread_id, body, _marker(link, ctx), deadline=deadline
        )
    said = "replied" if posted else "already replied (not posted again)"
    return ToolResult(True, f"{said} to thread {thread_id}: {reply.get('url')}", {"posted": posted})


def github_resolve(args: JsonObject, ctx: ToolContext) -> ToolResult:
    """Resolve one of the PR's review threads."""
    with _github(ctx) as (client, link, deadline):
        thread_id = _own_thread(client, link, str(args["thread_id"]), deadline)
        resolved = client.resolve_thread(thread_id, deadline=deadline)
    said = "resolved" if resolved else "was already resolved"
    return ToolResult(True, f"thread {thread_id} {said}", {"resolved_now": resolved})


def github_rerun_checks(_args: JsonObject, ctx: ToolContext) -> ToolResult:
    """Re-run the PR head's failed checks (a workflow already re-running is left alone)."""
    with _github(ctx) as (client, link, deadline):
        repo, number = _pull_request(link)
        sha = str((client.get_pull(repo, number, deadline=deadline).get("head") or {})["sha"])
        failed = [r for r in client.check_runs(repo, sha, deadline=deadline) if _failed(r)]
        done: list[str] = []
        workflows: set[int] = set()
        for run in failed:
            job = client.actions_job(repo, int(run["id"]), deadline=deadline)
            if job is None:
                client.rerequest_check_run(repo, int(run["id"]), deadline=deadline)
                done.append(f"- {run.get('name')}: re-requested")
                continue
            workflow = int(job["run_id"])
            if workflow in workflows:
                continue
            workflows.add(workflow)
            status = client.workflow_run(repo, workflow, deadline=deadline).get("status")
            if status in ("queued", "in_progress", "waiting", "pending", "requested"):
                done.append(f"- workflow run {workflow}: already {status}, left alone")
                continue
            client.rerun_failed_jobs(repo, workflow, deadline=deadline)
            done.append(f"- workflow run {workflow} ({run.get('name')}): failed jobs re-run")
    if not failed:
        return ToolResult(True, f"no failed checks on {sha[:12]}; nothing re-run", {"rerun": []})
    return ToolResult(True, "\n".join([f"re-ran on {sha[:12]}:", *done]), {"rerun": done})


def github_push(args: JsonObject, ctx: ToolContext) -> ToolResult:
    """Push the lane's commits to the PR's head branch: same repository, not protected,
    fast-forward only."""
    message = args.get("commit_message")
    with _github(ctx) as (client, link, deadline):
        repo, number = _pull_request(link)
        pull = client.get_pull(repo, number, deadline=deadline)
        head = pull.get("head") or {}
        branch = str(head.get("ref"))
        source = (head.get("repo") or {}).get("full_name")
        if source != repo:
            raise ToolError(
                f"PR #{number} comes from a fork ({source or 'a deleted repository'}); the "
                "engine pushes only to branches of the repository itself, so nothing was "
                "pushed. Describe the fix in a comment (github_comment) instead"
            )
        if pull.get("state") != "open":
            raise ToolError(f"PR #{number} is {pull.get('state')}; nothing was pushed")
        _unprotected(client, repo, branch, deadline)
        committed = _commit(ctx, message)
        pushed = _push(ctx, link, repo, branch)
    note = f"committed {committed[:12]}; " if committed else ""
    if pushed.up_to_date:
        content = f"{note}{branch} already has {pushed.sha[:12]}; nothing new to push"
    else:
        content = f"{note}pushed {pushed.sha[:12]} to {branch} (PR #{number})"
    return ToolResult(True, content, {"branch": branch, "sha": pushed.sha})


def github_open_pr(args: JsonObject, ctx: ToolContext) -> ToolResult:
    """Push the lane's branch and open a draft PR from it (or update the one already open)."""
    title, body = _text(args, "title"), _text(args, "body")
    link = _link(ctx)
    repo, branch = link.repo, link.lane_branch
    if branch is None:
        raise ToolError("this session works in no lane, so there is no branch to open a PR from")
    if repo is None:
        raise ToolError(
            "neither the trigger nor the rule (outputs.repo) names a repository to open a PR in"
        )
    base = args.get("base") or link.lane_base
    if not base or base == "HEAD":
        raise ToolError("give base: the branch the pull request merges into")
    with _github(ctx) as (client, _, deadline):
        _unprotected(client, repo, branch, deadline, missing_ok=True)
        committed = _commit(ctx, args.get("commit_message"))
        _push(ctx, link, repo, branch)
        marker = _marker(link, ctx)
        pull = client.open_draft_pr(repo, branch, str(base), title, body, marker, deadline=deadline)
    verb = "opened draft" if pull.created else "updated the open"
    note = f"committed {committed[:12]}; " if committed else ""
    data = {"url": pull.url, "number": pull.number, "created": pull.created}
    return ToolResult(True, f"{note}{verb} PR #{pull.number}: {pull.url}", data)


# --- helpers ----------------------------------------------------------------------------------


def _own_thread(client: ReviewClient, link: RunLink, thread_id: str, deadline: float) -> str:
    """`thread_id` when it is a review thread of the run's pull request."""
    repo, number = _pull_request(link)
    pull = client.thread(thread_id, deadline=deadline).get("pullRequest") or {}
    owner = (pull.get("repository") or {}).get("nameWithOwner")
    if pull.get("number") != number or str(owner).casefold() != repo.casefold():
        raise ToolError(
            f"thread {thread_id} is not a review thread of PR {repo}#{number}; use the ids "
            "github_threads lists"
        )
    return thread_id


def _unprotected(
    client: ReviewClient, repo: str, branch: str, deadline: float, *, missing_ok: bool = False
) -> None:
    try:
        found = client.branch(repo, branch, deadline=deadline)
    except AdeError as exc:
        if missing_ok and getattr(exc, "status", None) == 404:
            return  # a new branch: not protected
        raise
    if found.get("protected"):
        raise ToolError(f"{branch} is a protected branch; the engine never pushes to one")


def _commit(ctx: ToolContext, message: object) -> str | None:
    """Commit the worktree's changes when the call gave a message; refuse uncommitted ones
    otherwise (they would silently stay behind)."""
    if isinstance(message, str) and message.strip():
        return pushing.commit_all(ctx.worktree, message.strip())
    if pushing.git(ctx.worktree, "status", "--porcelain").strip():
        raise ToolError(
            "the worktree has uncommitted changes; commit them, or give commit_message and "
            "the engine commits them before pushing"
        )
    return None


def _push(ctx: ToolContext, link: RunLink, repo: str, branch: str) -> pushing.Pushed:
    assert link.github.token is not None
    url = f"{link.github.effective_git_url}/{repo}.git"
    try:
        return pushing.push(
            ctx.worktree,
            url,
            link.github.token.get_secret_value(),
            branch,
            timeout=max(min(ctx.time_left(), CALL_BUDGET_SEC), 1.0),
        )
    except pushing.PushRejectedError as exc:
        raise ToolError(f"refused: {exc.message}") from None


def _failed(run: JsonObject) -> bool:
    return run.get("conclusion") in FAILED


def _text(args: JsonObject, key: str) -> str:
    value = str(args[key]).strip()
    if not value:
        raise ToolError(f"{key} is empty")
    return value


def _cap(text: str, cap: int) -> str:
    return text if len(text) <= cap else text[:cap] + f"\n[... {len(text) - cap} characters cut]"


def _hunks(patch: str) -> list[str]:
    """A unified diff split at its `@@` headers."""
    hunks: list[str] = []
    for line in patch.splitlines():
        if line.startswith("@@") or not hunks:
            hunks.append(line)
        else:
            hunks[-1] += "\n" + line
    return hunks


TOOLS: dict[str, Tool] = {
    "github_pr": github_pr,
    "github_threads": github_threads,
    "github_checks": github_checks,
    "github_reply": github_reply,
    "github_resolve": github_resolve,
    "github_comment": github_comment,
    "github_rerun_checks": github_rerun_checks,
    "github_push": github_push,
    "github_open_pr": github_open_pr,
}
"""The `github` palette's tools by name."""

_BODY: JsonObject = {"type": "string", "description": "Markdown"}
_THREAD: JsonObject = {"type": "string", "description": "a thread id github_threads listed"}
_MESSAGE: JsonObject = {
    "type": "string",
    "description": "commit the worktree's uncommitted changes first, with this message",
}

SPECS: dict[str, ToolSpec] = {
    "github_pr": spec(
        "Read the run's pull request: title, branches, description and its changed files with "
        "their diff hunks (each capped at 2,000 characters). 'path' shows one file's hunks.",
        [],
        path=STRING,
    ),
    "github_threads": spec(
        "List the pull request's review threads with their comments and ids (state: "
        "'unresolved', the default, or 'all').",
        [],
        state={"type": "string", "enum": ["unresolved", "all"]},
    ),
    "github_checks": spec(
        "List the check runs of the pull request's head commit; for failed ones, the failed "
        "steps and the end of the job's log.",
        [],
    ),
    "github_reply": spec(
        "Reply to a review thread of the pull request.",
        ["thread_id", "body"],
        thread_id=_THREAD,
        body=_BODY,
    ),
    "github_resolve": spec(
        "Resolve a review thread of the pull request.", ["thread_id"], thread_id=_THREAD
    ),
    "github_comment": spec("Comment on the pull request.", ["body"], body=_BODY),
    "github_rerun_checks": spec("Re-run the pull request's failed checks.", []),
    "github_push": spec(
        "Push the lane's commits to the pull request's branch (fast-forward only; never to a "
        "fork or a protected branch).",
        [],
        commit_message=_MESSAGE,
    ),
    "github_open_pr": spec(
        "Push the lane's branch and open a draft pull request from it.",
        ["title", "body"],
        title=STRING,
        body=_BODY,
        base={
            "type": "string",
            "description": "the branch it merges into (default: the lane's base)",
        },
        commit_message=_MESSAGE,
    ),
}
"""The specs of the github tools, as providers send them to the model."""
