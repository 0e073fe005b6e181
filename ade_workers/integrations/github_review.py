"""GitHub reads and writes an agent's `github` palette makes on a pull request: its changed
files, review threads (GraphQL: REST has no threads), check runs with their Actions jobs and
logs, re-runs, branch protection, and replies and resolutions of threads.

`ReviewClient` extends `GithubClient`, so it shares its retries (Retry-After and GitHub's
secondary rate limit included), its error messages (which never carry the token) and its
marker helpers: a reply carries the same hidden marker as a comment and is looked for in the
thread before it is posted, so a repeated call finds its earlier reply instead of adding one.
"""

from __future__ import annotations

from typing import Any

from ade_tasks.json_document import JsonObject
from ade_workers.integrations.github import GithubClient, has_marker, marker_line, with_marker
from ade_workers.integrations.github_answers import refusal_advice
from ade_workers.integrations.http import IntegrationError

# A page of threads is 50 threads of their first 50 comments each (GitHub's maximum is 100).
#: Pages of threads or files a listing walks at most.
MAX_PAGES = 10

_THREADS = """
query($owner: String!, $name: String!, $number: Int!, $after: String) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      reviewThreads(first: 50, after: $after) {
        pageInfo { hasNextPage endCursor }
        nodes {
          id isResolved isOutdated path line
          comments(first: 50) {
            nodes { id databaseId author { login } body createdAt url }
          }
        }
      }
    }
  }
}
"""
_THREAD = """
query($id: ID!) {
  node(id: $id) {
    ... on PullRequestReviewThread {
      id isResolved
      pullRequest { number repository { nameWithOwner } }
      comments(last: 100) { nodes { id body url } }
    }
  }
}
"""
_REPLY = """
mutation($thread: ID!, $body: String!) {
  addPullRequestReviewThreadReply(input: {pullRequestReviewThreadId: $thread, body: $body}) {
    comment { id url }
  }
}
"""
_RESOLVE = """
mutation($thread: ID!) {
  resolveReviewThread(input: {threadId: $thread}) { thread { id isResolved } }
}
"""


def graphql_url(api_url: str) -> str:
    """GitHub's GraphQL endpoint for a REST base URL (Enterprise: /api/v3 -> /api/graphql)."""
    base = api_url.rstrip("/")
    if base.endswith("/api/v3"):
        return base.removesuffix("/v3") + "/graphql"
    return f"{base}/graphql"


class ReviewClient(GithubClient):
    """A `GithubClient` with the pull-request reads and review writes of the `github` palette."""

    def __init__(self, *, base_url: str = "https://api.github.com", **kwargs: Any) -> None:
        super().__init__(base_url=base_url, **kwargs)
        self._graphql = graphql_url(base_url)

    # -- reads ------------------------------------------------------------------------------------

    def pull_files(self, repo: str, number: int, *, deadline: float | None) -> list[JsonObject]:
        """The files a pull request changes, with their patches (GitHub omits huge ones)."""
        path = f"/repos/{repo}/pulls/{number}/files"

        def attempt() -> list[JsonObject]:
            files: list[JsonObject] = []
            for index, page in enumerate(self._pages(path, deadline)):
                files += [item for item in page if isinstance(item, dict)]
                if index + 1 >= MAX_PAGES:
                    break
            return files

        return self._retrying(f"list the files of {repo}#{number}", attempt, deadline)

    def review_threads(self, repo: str, number: int, *, deadline: float | None) -> list[JsonObject]:
        """The review threads of a pull request, each with its first comments."""
        owner, name = repo.split("/", 1)

        def attempt() -> list[JsonObject]:
            threads: list[JsonObject] = []
            after: str | None = None
            for _ in range(MAX_PAGES):
                data = self.graphql(
                    _THREADS,
                    {"owner": owner, "name": name, "number": number, "after": after},
                    deadline=deadline,
                )
                pull = _dig(data, "repository", "pullRequest")
                if pull is None:
                    raise self._http.refused(
                        f"pull request {repo}#{number} was not found (GraphQL)", status=404
                    )
                connection = _dig(pull, "reviewThreads") or {}
                threads += [n for n in connection.get("nodes") or [] if isinstance(n, dict)]
                page = connection.get("pageInfo") or {}
                if not page.get("hasNextPage"):
                    break
                after = page.get("endCursor")
            return threads

        return self._retrying(f"list the review threads of {repo}#{number}", attempt, deadline)

    def check_runs(self, repo: str, sha: str, *, deadline: float | None) -> list[JsonObject]:
        """The check runs of commit `sha` (up to 100, GitHub's page)."""
        path = f"/repos/{repo}/commits/{sha}/check-runs"

        def attempt() -> list[JsonObject]:
            data = self._request("GET", path, deadline, params={"per_page": 100})
            runs = data.get("check_runs") if isinstance(data, dict) else None
            if not isinstance(runs, list):
                raise self._unexpected("GET", path, "an object with 'check_runs'")
            return [run for run in runs if isinstance(run, dict)]

        return self._retrying(f"list the check runs of {repo}@{sha[:12]}", attempt, deadline)

    def actions_job(self, repo: str, job_id: int, *, deadline: float | None) -> JsonObject | None:
        """The GitHub Actions job behind a check run (its steps, its workflow run), or None
        when the check run is not an Actions job."""
        path = f"/repos/{repo}/actions/jobs/{job_id}"

        def attempt() -> JsonObject | None:
            try:
                data = self._request("GET", path, deadline)
            except IntegrationError as exc:
                if exc.status == 404:
                    return None
                raise
            return data if isinstance(data, dict) else None

        return self._retrying(f"read Actions job {job_id} of {repo}", attempt, deadline)

    def job_log(self, repo: str, job_id: int, *, deadline: float | None) -> str | None:
        """The plain-text log of an Actions job (GitHub redirects to a download), or None when
        GitHub has none (expired, or not an Actions job)."""
        path = f"/repos/{repo}/actions/jobs/{job_id}/logs"

        def attempt() -> str | None:
            try:
                return self._send("GET", path, deadline).text
            except IntegrationError as exc:
                if exc.status in (404, 410):
                    return None
                raise

        return self._retrying(f"read the log of Actions job {job_id} of {repo}", attempt, deadline)

    def workflow_run(self, repo: str, run_id: int, *, deadline: float | None) -> JsonObject:
        """An Actions workflow run (its status tells whether a re-run is under way)."""
        path = f"/repos/{repo}/actions/runs/{run_id}"
        return self._retrying(
            f"read workflow run {run_id} of {repo}",
            lambda: self._object("GET", path, deadline),
            deadline,
        )

    def branch(self, repo: str, branch: str, *, deadline: float | None) -> JsonObject:
        """A branch of `repo`, with `protected` and its head commit."""
        path = f"/repos/{repo}/branches/{branch}"
        return self._retrying(
            f"read branch {branch} of {repo}", lambda: self._object("GET", path, deadline), deadline
        )

    # -- writes -----------------------------------------------------------------------------------

    def rerun_failed_jobs(self, repo: str, run_id: int, *, deadline: float | None) -> None:
        """Re-run the failed jobs of an Actions workflow run."""
        path = f"/repos/{repo}/actions/runs/{run_id}/rerun-failed-jobs"
        self._retrying(
            f"re-run workflow run {run_id} of {repo}",
            lambda: self._send("POST", path, deadline),
            deadline,
        )

    def rerequest_check_run(self, repo: str, check_id: int, *, deadline: float | None) -> None:
        """Ask the app behind a (non-Actions) check run to run it again."""
        path = f"/repos/{repo}/check-runs/{check_id}/rerequest"
        self._retrying(
            f"re-request check run {check_id} of {repo}",
            lambda: self._send("POST", path, deadline),
            deadline,
        )

    def reply_to_thread(
        self, thread_id: str, body: str, marker: str, *, deadline: float | None
    ) -> tuple[JsonObject, bool]:
        """Reply to a review thread, unless a reply carrying `marker` is already there;
        (the reply, whether it was posted now)."""
        line = marker_line(marker)
        text = with_marker(body, marker)

        def attempt() -> tuple[JsonObject, bool]:
            thread = self.thread(thread_id, deadline=deadline)
            comments = _dig(thread, "comments", "nodes") or []
            for comment in comments:
                if isinstance(comment, dict) and has_marker(comment.get("body"), line):
                    return comment, False
            data = self.graphql(_REPLY, {"thread": thread_id, "body": text}, deadline=deadline)
            return _dig(data, "addPullRequestReviewThreadReply", "comment") or {}, True

        return self._retrying(f"reply to review thread {thread_id}", attempt, deadline)

    def resolve_thread(self, thread_id: str, *, deadline: float | None) -> bool:
        """Resolve a review thread; False when it was resolved already."""

        def attempt() -> bool:
            if self.thread(thread_id, deadline=deadline).get("isResolved"):
                return False
            self.graphql(_RESOLVE, {"thread": thread_id}, deadline=deadline)
            return True

        return self._retrying(f"resolve review thread {thread_id}", attempt, deadline)

    def thread(self, thread_id: str, *, deadline: float | None) -> JsonObject:
        """One review thread: resolved or not, its pull request, its last 100 comments."""
        node = _dig(self.graphql(_THREAD, {"id": thread_id}, deadline=deadline), "node")
        if not isinstance(node, dict) or not node:
            raise self._http.refused(f"review thread {thread_id} was not found", status=404)
        return node

    # -- plumbing ---------------------------------------------------------------------------------

    def graphql(self, query: str, variables: JsonObject, *, deadline: float | None) -> JsonObject:
        """One GraphQL request's `data`; its `errors` raise (NOT_FOUND as a 404, FORBIDDEN as
        a 403, so callers treat them as the REST answers)."""
        data = self._request(
            "POST", self._graphql, deadline, json={"query": query, **_vars(variables)}
        )
        if not isinstance(data, dict):
            raise self._unexpected("POST", "/graphql", "a GraphQL answer")
        errors = data.get("errors")
        if isinstance(errors, list) and errors:
            first = errors[0] if isinstance(errors[0], dict) else {}
            kind = str(first.get("type") or "")
            status = {"NOT_FOUND": 404, "FORBIDDEN": 403, "INSUFFICIENT_SCOPES": 403}.get(kind)
            said = "; ".join(str(e.get("message")) for e in errors if isinstance(e, dict))
            advice = (
                refusal_advice(status, "POST", has_token=bool(self._token))
                if status
                else "check the request"
            )
            raise self._http.refused(
                f"POST /graphql answered {kind or 'an error'} ({said[:300]}); {advice}",
                status=status,
            )
        result = data.get("data")
        return result if isinstance(result, dict) else {}

    def _object(self, method: str, path: str, deadline: float | None) -> JsonObject:
        data = self._request(method, path, deadline)
        if not isinstance(data, dict):
            raise self._unexpected(method, path, "an object")
        return data


def _vars(variables: JsonObject) -> JsonObject:
    return {"variables": {k: v for k, v in variables.items() if v is not None}}


def _dig(data: object, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data
