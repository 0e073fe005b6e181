"""A scripted GitHub on 127.0.0.1 for the pull-request loop: REST, the GraphQL the engine
sends for review threads, and `git push` / `git fetch` over HTTP against real bare repositories.

`FakeGithub` extends `tests.fake_http.ScriptedServer` (issues, comments, labels, pulls, Link
pagination, the fault queue) with what the agent's `github` palette reads and writes:

- **Pull requests**: `seed_pull(...)` (inherited) plus `set_files(repo, n, files)` for
  `GET /repos/{r}/pulls/{n}/files` and `fork_pull(repo, n, "someone/fork")` to make a PR come
  from a fork. `GET /pulls/{n}` reports the head branch's current commit from the bare repo.
- **Review threads** (GraphQL `POST /graphql`): `add_thread(repo, n, body, path=, line=,
  author=)` returns the thread id; `reviewThreads`, `node(id)`, `addPullRequestReviewThreadReply`
  and `resolveReviewThread` are answered; `threads[id]` holds each thread's state.
- **Checks**: `add_check(repo, sha, name, conclusion, log=, failed_steps=, actions=True)`
  returns the check run id (= the Actions job id); `GET .../commits/{sha}/check-runs`,
  `GET .../actions/jobs/{id}` (+ `/logs`), `GET .../actions/runs/{id}`,
  `POST .../actions/runs/{id}/rerun-failed-jobs`, `POST .../check-runs/{id}/rerequest`;
  `reruns` lists what was re-run.
- **Branches and git**: `git_repo(repo)` creates the bare repository served at
  `{git_url}/{owner}/{name}.git` (set `ADE_GITHUB__GIT_URL` to `server.git_url`) by the real
  `git http-backend` (CGI), which needs `Authorization: Basic x-access-token:<token>` when the
  server has a token (`public=True`: fetching needs none, as for a public repository; pushing
  still does). `protect(repo, branch)` makes `GET .../branches/{b}` say `protected` and
  the repository's pre-receive hook refuse pushes to it with GitHub's GH006 message.
- **Calls and faults**: `calls` is every request recorded (method, path, query, headers, json;
  git requests carry no body); `fail_next(status, headers=, message=, method=, path_prefix=)`
  answers the next matching request with an error, e.g.
  `fail_next(403, headers=MISSING_SCOPE)` (a token without `repo`),
  `fail_next(403, headers={"Retry-After": "1"}, message=SECONDARY_RATE_LIMIT)`,
  `fail_next(404, path_prefix="/repos/acme/widgets/pulls/1")` (the PR is gone),
  `fail_next(409, path_prefix="/git/")` (the push's receive-pack refused: the branch moved).

    with FakeGithub(token="t0k", root=tmp_path) as server:
        server.git_repo("acme/widgets")  # then push a main and a feature branch into it
        pr = server.seed_pull("acme/widgets", "Fix", created_at=..., head="feature")
"""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fake_http import RecordedRequest, ScriptedServer, _error
from tests.scripted_http import _Handler

MISSING_SCOPE = {"X-Accepted-OAuth-Scopes": "repo", "X-OAuth-Scopes": "read:org"}
"""Headers of GitHub's 403 for a classic token without the scope a call needs."""
SECONDARY_RATE_LIMIT = "You have exceeded a secondary rate limit. Please wait a few minutes."
_PROTECT_HOOK = """#!/bin/sh
while read old new ref; do
  for branch in $(cat "$GIT_DIR/protected" 2>/dev/null); do
    if [ "$ref" = "refs/heads/$branch" ]; then
      echo "error: GH006: Protected branch update failed for $ref." >&2
      exit 1
    fi
  done
done
"""


class FakeGithub(ScriptedServer):
    """`ScriptedServer` plus pull-request files, review threads, checks and git over HTTP."""

    def __init__(
        self, *, root: Path, token: str | None = None, public: bool = False, **kwargs: Any
    ) -> None:
        self.handler_class = _GitHandler
        super().__init__("github", token=token, **kwargs)
        self.public = public
        self.git_root = root / "fake-github-git"
        self.git_root.mkdir(parents=True, exist_ok=True)
        self.files: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self.threads: dict[str, dict[str, Any]] = {}
        self.checks: dict[str, list[dict[str, Any]]] = {}  # by commit sha
        self.jobs: dict[int, dict[str, Any]] = {}
        self.logs: dict[int, str] = {}
        self.workflow_runs: dict[int, dict[str, Any]] = {}
        self.reruns: list[str] = []

    # -- seeding ----------------------------------------------------------------------------------

    @property
    def calls(self) -> list[RecordedRequest]:
        """Every request so far, in order."""
        with self.lock:
            return list(self.requests)

    @property
    def git_url(self) -> str:
        """The git base URL (`ADE_GITHUB__GIT_URL`)."""
        return f"{self.url}/git"

    def git_repo(self, repo: str) -> Path:
        """Create (or return) the bare repository behind `repo`, pushable over HTTP."""
        path = self.git_root / f"{repo}.git"
        if not path.exists():
            subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
            subprocess.run(
                ["git", "-C", str(path), "config", "http.receivepack", "true"], check=True
            )
            hook = path / "hooks" / "pre-receive"
            hook.write_text(_PROTECT_HOOK)
            hook.chmod(0o755)
        return path

    def protect(self, repo: str, branch: str) -> None:
        """Make `branch` protected: the API says so and pushes to it are refused."""
        path = self.git_repo(repo)
        with (path / "protected").open("a") as handle:
            handle.write(f"{branch}\n")

    def head_of(self, repo: str, branch: str) -> str | None:
        """The commit `branch` points at in the bare repository, or None."""
        path = self.git_root / f"{repo}.git"
        if not path.exists():
            return None
        result = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "--verify", "-q", f"refs/heads/{branch}"],
            capture_output=True,
            text=True,
        )
        return result.stdout.strip() or None

    def set_files(self, repo: str, number: int, files: list[dict[str, Any]]) -> None:
        """The changed files `GET /pulls/{n}/files` lists (filename, status, patch, ...)."""
        with self.lock:
            self.files[(repo, number)] = [
                {"additions": 1, "deletions": 0, "status": "modified", **f} for f in files
            ]

    def fork_pull(self, repo: str, number: int, fork: str) -> None:
        """Make PR `number` come from the repository `fork`."""
        with self.lock:
            pull = self._find_pull(repo, number)
            assert pull is not None
            pull["head"]["repo"] = {"full_name": fork}
            pull["head"]["label"] = f"{fork.split('/')[0]}:{pull['head']['ref']}"

    def add_thread(
        self,
        repo: str,
        number: int,
        body: str,
        *,
        path: str = "src/app.py",
        line: int = 1,
        author: str = "reviewer",
    ) -> str:
        """A review thread on PR `number` with one comment; its GraphQL node id."""
        with self.lock:
            thread_id = f"PRRT_{self._new_id()}"
            self.threads[thread_id] = {
                "id": thread_id,
                "repo": repo,
                "number": number,
                "isResolved": False,
                "isOutdated": False,
                "path": path,
                "line": line,
                "comments": [self._thread_comment(body, author)],
            }
            return thread_id

    def add_check(
        self,
        repo: str,
        sha: str,
        name: str,
        conclusion: str | None,
        *,
        log: str | None = None,
        failed_steps: tuple[str, ...] = (),
        actions: bool = True,
        summary: str = "",
    ) -> int:
        """A check run on commit `sha` (an Actions job with `log` unless `actions` is False)."""
        with self.lock:
            check_id = self._new_id()
            workflow = self._new_id()
            self.checks.setdefault(sha, []).append(
                {
                    "id": check_id,
                    "name": name,
                    "head_sha": sha,
                    "status": "completed" if conclusion else "in_progress",
                    "conclusion": conclusion,
                    "html_url": f"{self.html_base}/{repo}/runs/{check_id}",
                    "output": {"title": name, "summary": summary, "text": None},
                }
            )
            if actions:
                steps = [{"number": 1, "name": "Set up job", "conclusion": "success"}]
                steps += [
                    {"number": i + 2, "name": s, "conclusion": "failure"}
                    for i, s in enumerate(failed_steps)
                ]
                self.jobs[check_id] = {"id": check_id, "run_id": workflow, "steps": steps}
                self.workflow_runs[workflow] = {
                    "id": workflow,
                    "status": "completed",
                    "conclusion": conclusion,
                }
                if log is not None:
                    self.logs[check_id] = log
            return check_id

    # -- request handling -------------------------------------------------------------------------

    def _github(self, request: RecordedRequest) -> tuple[int, dict[str, str], Any]:
        if (
            self.token is not None
            and request.headers.get("authorization") != f"Bearer {self.token}"
        ):
            return _error(401, "Bad credentials")
        if request.path == "/graphql" and request.method == "POST":
            return self._graphql(request.json if isinstance(request.json, dict) else {})
        parts = request.path.strip("/").split("/")
        if len(parts) >= 4 and parts[0] == "repos" and f"{parts[1]}/{parts[2]}" in self.repos:
            answer = self._review(f"{parts[1]}/{parts[2]}", parts[3:], request)
            if answer is not None:
                return answer
        return super()._github(request)

    def _review(
        self, repo: str, rest: list[str], request: RecordedRequest
    ) -> tuple[int, dict[str, str], Any] | None:
        method = request.method
        match rest:
            case ["pulls", num] if method == "GET" and num.isdigit():
                pull = self._find_pull(repo, int(num))
                if pull is not None and pull["head"].get("repo", {}).get("full_name") == repo:
                    head = self.head_of(repo, pull["head"]["ref"])
                    if head:
                        pull["head"]["sha"] = head
                return None
            case ["pulls", num, "files"] if method == "GET" and num.isdigit():
                if self._find_pull(repo, int(num)) is None:
                    return _error(404, "Not Found")
                return 200, {}, [dict(f) for f in self.files.get((repo, int(num)), [])]
            case ["branches", *branch] if method == "GET":
                name = "/".join(branch)
                sha = self.head_of(repo, name)
                if sha is None:
                    return _error(404, "Branch not found")
                protected_file = self.git_root / f"{repo}.git" / "protected"
                protected = protected_file.exists() and name in protected_file.read_text().split()
                return 200, {}, {"name": name, "commit": {"sha": sha}, "protected": protected}
            case ["commits", sha, "check-runs"] if method == "GET":
                runs = [dict(r) for r in self.checks.get(sha, [])]
                return 200, {}, {"total_count": len(runs), "check_runs": runs}
            case ["actions", "jobs", job] if method == "GET" and job.isdigit():
                found = self.jobs.get(int(job))
                return (200, {}, dict(found)) if found else _error(404, "Not Found")
            case ["actions", "jobs", job, "logs"] if method == "GET" and job.isdigit():
                log = self.logs.get(int(job))
                return (200, {}, log) if log is not None else _error(404, "Not Found")
            case ["actions", "runs", run] if method == "GET" and run.isdigit():
                found = self.workflow_runs.get(int(run))
                return (200, {}, dict(found)) if found else _error(404, "Not Found")
            case ["actions", "runs", run, "rerun-failed-jobs"] if method == "POST":
                found = self.workflow_runs.get(int(run))
                if found is None:
                    return _error(404, "Not Found")
                found["status"] = "queued"
                self.reruns.append(f"workflow:{run}")
                return 201, {}, {}
            case ["check-runs", check, "rerequest"] if method == "POST":
                self.reruns.append(f"check:{check}")
                return 201, {}, {}
        return None

    def _graphql(self, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        query = str(body.get("query") or "")
        variables = body.get("variables") or {}
        if "addPullRequestReviewThreadReply" in query:
            thread = self.threads.get(str(variables.get("thread")))
            if thread is None:
                return _graph_error("NOT_FOUND", "Could not resolve to a node")
            comment = self._thread_comment(str(variables.get("body")), "ade-bot")
            thread["comments"].append(comment)
            return 200, {}, {"data": {"addPullRequestReviewThreadReply": {"comment": comment}}}
        if "resolveReviewThread" in query:
            thread = self.threads.get(str(variables.get("thread")))
            if thread is None:
                return _graph_error("NOT_FOUND", "Could not resolve to a node")
            thread["isResolved"] = True
            node = {"id": thread["id"], "isResolved": True}
            return 200, {}, {"data": {"resolveReviewThread": {"thread": node}}}
        if "reviewThreads" in query:
            repo = f"{variables.get('owner')}/{variables.get('name')}"
            number = variables.get("number")
            if repo not in self.repos or self._find_pull(repo, int(number or 0)) is None:
                return 200, {}, {"data": {"repository": {"pullRequest": None}}}
            nodes = [
                self._thread_node(t)
                for t in self.threads.values()
                if t["repo"] == repo and t["number"] == number
            ]
            page = {"hasNextPage": False, "endCursor": None}
            connection = {"pageInfo": page, "nodes": nodes}
            return 200, {}, {"data": {"repository": {"pullRequest": {"reviewThreads": connection}}}}
        if "node(id:" in query:
            thread = self.threads.get(str(variables.get("id")))
            if thread is None:
                return 200, {}, {"data": {"node": None}}
            node = self._thread_node(thread)
            node["pullRequest"] = {
                "number": thread["number"],
                "repository": {"nameWithOwner": thread["repo"]},
            }
            return 200, {}, {"data": {"node": node}}
        return _graph_error("UNKNOWN", f"the fake does not answer this query: {query[:80]}")

    def _thread_comment(self, body: str, author: str) -> dict[str, Any]:
        cid = self._new_id()
        return {
            "id": f"PRRC_{cid}",
            "databaseId": cid,
            "author": {"login": author},
            "body": body,
            "createdAt": "2024-01-01T00:00:00Z",
            "url": f"{self.html_base}/pull#discussion_r{cid}",
        }

    def _thread_node(self, thread: dict[str, Any]) -> dict[str, Any]:
        node = {k: thread[k] for k in ("id", "isResolved", "isOutdated", "path", "line")}
        node["comments"] = {"nodes": [dict(c) for c in thread["comments"]]}
        return node

    def git_authorized(self, header: str | None, service: str = "git-receive-pack") -> bool:
        """Whether a git request for `service` may go on: its Authorization header carries the
        server's token, or the server has none, or it fetches (`git-upload-pack`) and the
        repositories are public."""
        if self.token is None or (self.public and service == "git-upload-pack"):
            return True
        expected = base64.b64encode(f"x-access-token:{self.token}".encode()).decode()
        return header == f"Basic {expected}"


def _graph_error(kind: str, message: str) -> tuple[int, dict[str, str], Any]:
    return 200, {}, {"data": None, "errors": [{"type": kind, "message": message}]}


class _GitHandler(_Handler):
    """Serves `/git/...` with `git http-backend`; everything else as the scripted GitHub."""

    def _serve(self) -> None:
        if not self.path.startswith("/git/"):
            super()._serve()
            return
        server: FakeGithub = self.server.scripted  # type: ignore[assignment]
        split = urlsplit(self.path)
        body = self._body()
        request = RecordedRequest(
            method=self.command,
            path=split.path,
            query=parse_qs(split.query),
            headers={k.lower(): v for k, v in self.headers.items()},
            json=None,
        )
        with server.lock:
            server.requests.append(request)
            fault = next((f for f in server.faults if f.matches(request)), None)
            if fault is not None:
                server.faults.remove(fault)
        if fault is not None and fault.status is not None:
            self._answer(fault.status, {**fault.headers}, str(fault.body).encode())
            return
        service = "git-receive-pack" if "receive-pack" in self.path else "git-upload-pack"
        if not server.git_authorized(self.headers.get("Authorization"), service):
            self._answer(401, {"WWW-Authenticate": 'Basic realm="GitHub"'}, b"Bad credentials")
            return
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(server.git_root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": split.path.removeprefix("/git"),
            "QUERY_STRING": split.query,
            "REQUEST_METHOD": self.command,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": "x-access-token",
            "REMOTE_ADDR": "127.0.0.1",
        }
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        result = subprocess.run(
            ["git", "http-backend"], input=body, env=env, capture_output=True, timeout=60
        )
        head, _, payload = result.stdout.partition(b"\r\n\r\n")
        status, headers = 200, {}
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                headers[name.strip()] = value.strip()
        self._answer(status, headers, payload)

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _answer(self, status: int, headers: dict[str, str], payload: bytes) -> None:
        self.send_response(status)
        for name, value in headers.items():
            if name.lower() != "content-length":
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve
