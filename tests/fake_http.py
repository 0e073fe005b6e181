"""Scripted local HTTP servers for tests: a small in-memory GitHub and a notify webhook.

A `ScriptedServer` (a `tests.scripted_http.ScriptedHttpServer`: loopback, request log, fault
queue) answers either like GitHub's REST API (`kind="github"`) or like a Slack incoming webhook
(`kind="webhook"`). Issues, pull requests and comments seeded with `seed_issue` / `seed_pull` /
`seed_comment` are listed as GitHub lists them (`since`, `sort=updated`, Link pagination). Faults
queued with `fail_next` / `delay_next` are served, one per matching request, so a test scripts
"500, then success" in one line.

    with ScriptedServer(repos=["acme/widgets"]) as server:
        server.fail_next(status=503)
        client = GithubClient(base_url=server.url, token="t")
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal
from urllib.parse import urlencode

from tests.github_lists import instant, paginate, since_filter, sorted_items
from tests.scripted_http import DOCS, RecordedRequest, ScriptedHttpServer

__all__ = ["RecordedRequest", "ScriptedServer"]


class ScriptedServer(ScriptedHttpServer):
    """A loopback HTTP server with an in-memory GitHub model (or a webhook) and a fault queue."""

    def __init__(
        self,
        kind: Literal["github", "webhook"] = "github",
        *,
        repos: Iterable[str] = ("acme/widgets",),
        token: str | None = None,
        html_base: str = "https://github.example",
    ) -> None:
        self.kind = kind
        self.token = token
        self.html_base = html_base
        self.repos = set(repos)
        self.comments: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self.labels: dict[tuple[str, int], list[str]] = {}
        self.pulls: dict[str, list[dict[str, Any]]] = {}
        # Issues and pull requests as GET /issues lists them (a PR also has an entry in `pulls`).
        self.issues: dict[str, list[dict[str, Any]]] = {}
        # GET /issues/events: what happened to issues and PRs (labeled, renamed), newest last.
        self.issue_events: dict[str, list[dict[str, Any]]] = {}
        self._next_id = 1000
        super().__init__()

    # -- seeding --------------------------------------------------------------------------------

    def add_comment(self, repo: str, number: int, body: str) -> dict[str, Any]:
        """Seed a comment as if someone had posted it."""
        with self.lock:
            return self._create_comment(repo, number, body)

    def seed_issue(
        self,
        repo: str,
        title: str,
        *,
        created_at: str,
        updated_at: str | None = None,
        closed_at: str | None = None,
        user: str = "octocat",
        body: str | None = None,
        labels: Iterable[str] = (),
        author_association: str = "MEMBER",
    ) -> dict[str, Any]:
        """Seed an issue as if someone had opened it (closed too when `closed_at` is given)."""
        with self.lock:
            issue = self._seed_issue_item(
                repo,
                title,
                created_at,
                updated_at or closed_at or created_at,
                closed_at,
                user,
                body,
                labels,
                author_association,
            )
            return dict(issue)

    def seed_pull(
        self,
        repo: str,
        title: str,
        *,
        created_at: str,
        updated_at: str | None = None,
        closed_at: str | None = None,
        merged_at: str | None = None,
        user: str = "octocat",
        body: str | None = None,
        labels: Iterable[str] = (),
        author_association: str = "MEMBER",
        head: str = "feature",
        base: str = "main",
        head_sha: str = "a" * 40,
        pushed_at: str | None = None,
        draft: bool = False,
    ) -> dict[str, Any]:
        """Seed a pull request: its issue-view item for GET /issues and its details for
        GET /pulls/{n} (`pushed_at` is the head repository's last push, default `created_at`)."""
        with self.lock:
            issue = self._seed_issue_item(
                repo,
                title,
                created_at,
                updated_at or closed_at or created_at,
                closed_at,
                user,
                body,
                labels,
                author_association,
            )
            number = issue["number"]
            issue["draft"] = draft
            issue["pull_request"] = {
                "url": f"{self.url}/repos/{repo}/pulls/{number}",
                "html_url": f"{self.html_base}/{repo}/pull/{number}",
                "merged_at": merged_at,
            }
            issue["html_url"] = f"{self.html_base}/{repo}/pull/{number}"
            owner = repo.split("/")[0]
            repository = {"full_name": repo, "pushed_at": pushed_at or created_at}
            pull = {
                **{k: issue[k] for k in ("id", "number", "state", "title", "body", "user")},
                **{k: issue[k] for k in ("labels", "created_at", "updated_at", "closed_at")},
                "author_association": author_association,
                "draft": draft,
                "merged": merged_at is not None,
                "merged_at": merged_at,
                "merged_by": {"login": user} if merged_at else None,
                "head": {
                    "label": f"{owner}:{head}",
                    "ref": head,
                    "sha": head_sha,
                    "repo": repository,
                },
                "base": {
                    "label": f"{owner}:{base}",
                    "ref": base,
                    "sha": "b" * 40,
                    "repo": dict(repository),
                },
                "url": f"{self.url}/repos/{repo}/pulls/{number}",
                "html_url": issue["html_url"],
            }
            self.pulls.setdefault(repo, []).append(pull)
            return dict(issue)

    def seed_comment(
        self,
        repo: str,
        number: int,
        body: str,
        *,
        created_at: str,
        updated_at: str | None = None,
        user: str = "octocat",
        author_association: str = "MEMBER",
    ) -> dict[str, Any]:
        """Seed a comment on issue or PR `number`; like GitHub, it bumps the issue's updated_at."""
        with self.lock:
            issue = self._find_issue(repo, number)
            comment = self._create_comment(repo, number, body)
            cid = comment["id"]
            kind = "pull" if issue is not None and "pull_request" in issue else "issues"
            comment.update(
                html_url=f"{self.html_base}/{repo}/{kind}/{number}#issuecomment-{cid}",
                user={"login": user, "id": 2, "type": "User"},
                author_association=author_association,
                created_at=created_at,
                updated_at=updated_at or created_at,
            )
            self.comments[(repo, number)][-1] = comment
            if issue is not None:
                self._touch(repo, number, updated_at or created_at)
            return dict(comment)

    def label(self, repo: str, number: int, label: str, *, at: str, actor: str = "octocat") -> None:
        """Add `label` to issue or PR `number` at `at`, as GitHub records it (an issue event,
        the label on the item, its updated_at moved)."""
        with self.lock:
            for item in [self._find_issue(repo, number), self._find_pull(repo, number)]:
                if item is not None:
                    item["labels"] = [*item["labels"], {"id": self._new_id(), "name": label}]
            self._record_event(repo, number, "labeled", at, actor, label={"name": label})
            self._touch(repo, number, at)

    def rename(
        self, repo: str, number: int, title: str, *, at: str, actor: str = "octocat"
    ) -> None:
        """Change the title of issue or PR `number` at `at` (a `renamed` issue event)."""
        with self.lock:
            old = ""
            for item in [self._find_issue(repo, number), self._find_pull(repo, number)]:
                if item is not None:
                    old, item["title"] = item["title"], title
            self._record_event(
                repo, number, "renamed", at, actor, rename={"from": old, "to": title}
            )
            self._touch(repo, number, at)

    def _record_event(
        self, repo: str, number: int, kind: str, at: str, actor: str, **detail: Any
    ) -> None:
        issue = self._find_issue(repo, number)
        self.issue_events.setdefault(repo, []).append(
            {
                "id": self._new_id(),
                "event": kind,
                "actor": {"login": actor, "id": 3, "type": "User"},
                "created_at": at,
                "issue": dict(issue) if issue is not None else {"number": number},
                **detail,
            }
        )

    def close_issue(self, repo: str, number: int, at: str, *, merged: bool = False) -> None:
        """Close issue or PR `number` at `at` (a PR merged when `merged`)."""
        with self.lock:
            for item in [self._find_issue(repo, number), self._find_pull(repo, number)]:
                if item is not None:
                    item.update(state="closed", closed_at=at)
            pull = self._find_pull(repo, number)
            if pull is not None and merged:
                pull.update(merged=True, merged_at=at, merged_by=pull["user"])
                issue = self._find_issue(repo, number)
                if issue is not None:
                    issue["pull_request"]["merged_at"] = at
            self._touch(repo, number, at)

    def comment_bodies(self, repo: str, number: int) -> list[str]:
        with self.lock:
            return [c["body"] for c in self.comments.get((repo, number), [])]

    def open_pulls(self, repo: str) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(p) for p in self.pulls.get(repo, []) if p["state"] == "open"]

    # -- answering (called by the handler thread, under `lock`) ---------------------------------

    def answer(self, request: RecordedRequest) -> tuple[int, dict[str, str], Any]:
        return self._webhook(request) if self.kind == "webhook" else self._github(request)

    def _webhook(self, request: RecordedRequest) -> tuple[int, dict[str, str], Any]:
        if request.method != "POST":
            return 405, {}, "method_not_allowed"
        if not isinstance(request.json, dict) or not isinstance(request.json.get("text"), str):
            return 400, {}, "invalid_payload"
        return 200, {}, "ok"

    def _github(self, request: RecordedRequest) -> tuple[int, dict[str, str], Any]:
        if (
            self.token is not None
            and request.headers.get("authorization") != f"Bearer {self.token}"
        ):
            return _error(401, "Bad credentials")
        parts = request.path.strip("/").split("/")
        if len(parts) < 4 or parts[0] != "repos":
            return _error(404, "Not Found")
        repo = f"{parts[1]}/{parts[2]}"
        if repo not in self.repos:
            return _error(404, "Not Found")
        rest, method = parts[3:], request.method
        body = request.json if isinstance(request.json, dict) else {}
        match rest:
            case ["issues"] if method == "GET":
                return self._list_issues(repo, request)
            case ["issues", "comments"] if method == "GET":
                return self._list_repo_comments(repo, request)
            case ["issues", "events"] if method == "GET":
                # Newest first, and no `since`: GitHub lists every event it keeps.
                events = sorted(self.issue_events.get(repo, []), key=lambda e: -e["id"])
                return paginate(self.url, request, events)
            case ["pulls", num] if method == "GET" and num.isdigit():
                pull = self._find_pull(repo, int(num))
                return (200, {}, dict(pull)) if pull is not None else _error(404, "Not Found")
            case ["issues", "comments", cid] if method == "PATCH" and cid.isdigit():
                return self._update_comment(repo, int(cid), body)
            case ["issues", num, "comments"] if method == "GET" and num.isdigit():
                return self._list_comments(repo, int(num), request)
            case ["issues", num, "comments"] if method == "POST" and num.isdigit():
                if not isinstance(body.get("body"), str):
                    return _error(422, 'Invalid request.\n\n"body" wasn\'t supplied.')
                return 201, {}, self._create_comment(repo, int(num), body["body"])
            case ["issues", num, "labels"] if method == "POST" and num.isdigit():
                return self._add_labels(repo, int(num), body)
            case ["pulls"] if method == "GET":
                return self._list_pulls(repo, request)
            case ["pulls"] if method == "POST":
                return self._create_pull(repo, body)
            case ["pulls", num] if method == "PATCH" and num.isdigit():
                return self._update_pull(repo, int(num), body)
        return _error(404, "Not Found")

    def _seed_issue_item(
        self,
        repo: str,
        title: str,
        created_at: str,
        updated_at: str,
        closed_at: str | None,
        user: str,
        body: str | None,
        labels: Iterable[str],
        author_association: str,
    ) -> dict[str, Any]:
        number = _seed_number(self, repo)
        issue: dict[str, Any] = {
            "id": self._new_id(),
            "number": number,
            "title": title,
            "body": body,
            "user": {"login": user, "id": 2, "type": "User"},
            "labels": [{"id": 100 + i, "name": name} for i, name in enumerate(labels)],
            "state": "closed" if closed_at else "open",
            "author_association": author_association,
            "created_at": created_at,
            "updated_at": updated_at,
            "closed_at": closed_at,
            "url": f"{self.url}/repos/{repo}/issues/{number}",
            "html_url": f"{self.html_base}/{repo}/issues/{number}",
        }
        self.issues.setdefault(repo, []).append(issue)
        return issue

    def _find_issue(self, repo: str, number: int) -> dict[str, Any] | None:
        return next((i for i in self.issues.get(repo, []) if i["number"] == number), None)

    def _find_pull(self, repo: str, number: int) -> dict[str, Any] | None:
        return next((p for p in self.pulls.get(repo, []) if p["number"] == number), None)

    def _touch(self, repo: str, number: int, at: str) -> None:
        for item in [self._find_issue(repo, number), self._find_pull(repo, number)]:
            # Pull requests opened through the API here carry no timestamps; they stay as they are.
            if (
                item is not None
                and "updated_at" in item
                and instant(at) > instant(item["updated_at"])
            ):
                item["updated_at"] = at

    def _list_issues(self, repo: str, request: RecordedRequest) -> tuple[int, dict[str, str], Any]:
        state = request.query.get("state", ["open"])[0]
        found = [i for i in self.issues.get(repo, []) if state == "all" or i["state"] == state]
        return paginate(self.url, request, sorted_items(since_filter(found, request), request))

    def _list_repo_comments(
        self, repo: str, request: RecordedRequest
    ) -> tuple[int, dict[str, str], Any]:
        found = [c for (r, _), comments in self.comments.items() if r == repo for c in comments]
        return paginate(self.url, request, sorted_items(since_filter(found, request), request))

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _create_comment(self, repo: str, number: int, body: str) -> dict[str, Any]:
        cid = self._new_id()
        comment = {
            "id": cid,
            "node_id": f"IC_{cid}",
            "url": f"{self.url}/repos/{repo}/issues/comments/{cid}",
            "html_url": f"{self.html_base}/{repo}/issues/{number}#issuecomment-{cid}",
            "issue_url": f"{self.url}/repos/{repo}/issues/{number}",
            "body": body,
            "user": {"login": "ade-bot", "id": 1, "type": "Bot"},
            "created_at": "2024-01-01T00:00:00Z",
            "updated_at": "2024-01-01T00:00:00Z",
        }
        self.comments.setdefault((repo, number), []).append(comment)
        return dict(comment)

    def _update_comment(
        self, repo: str, cid: int, body: dict[str, Any]
    ) -> tuple[int, dict[str, str], Any]:
        for (owner_repo, _), comments in self.comments.items():
            for comment in comments:
                if owner_repo == repo and comment["id"] == cid:
                    comment["body"] = body.get("body", comment["body"])
                    comment["updated_at"] = "2024-01-01T00:01:00Z"
                    return 200, {}, dict(comment)
        return _error(404, "Not Found")

    def _list_comments(
        self, repo: str, number: int, request: RecordedRequest
    ) -> tuple[int, dict[str, str], Any]:
        per_page = min(int(request.query.get("per_page", ["30"])[0]), 100)
        page = int(request.query.get("page", ["1"])[0])
        comments = self.comments.get((repo, number), [])
        last = max((len(comments) + per_page - 1) // per_page, 1)
        chunk = comments[(page - 1) * per_page : page * per_page]
        headers = {}
        links = []
        base = f"{self.url}{request.path}"
        if page < last:
            links.append(
                f'<{base}?{urlencode({"per_page": per_page, "page": page + 1})}>; rel="next"'
            )
            links.append(f'<{base}?{urlencode({"per_page": per_page, "page": last})}>; rel="last"')
        if page > 1:
            links.append(f'<{base}?{urlencode({"per_page": per_page, "page": 1})}>; rel="first"')
        if links:
            headers["Link"] = ", ".join(links)
        return 200, headers, [dict(c) for c in chunk]

    def _add_labels(
        self, repo: str, number: int, body: dict[str, Any]
    ) -> tuple[int, dict[str, str], Any]:
        names = body.get("labels")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            return _error(422, 'Invalid request.\n\n"labels" must be a list of strings.')
        current = self.labels.setdefault((repo, number), [])
        current.extend(n for n in names if n not in current)
        return (
            200,
            {},
            [
                {"id": 100 + i, "name": name, "color": "ededed", "default": False}
                for i, name in enumerate(current)
            ],
        )

    def _list_pulls(self, repo: str, request: RecordedRequest) -> tuple[int, dict[str, str], Any]:
        head = request.query.get("head", [None])[0]
        state = request.query.get("state", ["open"])[0]
        found = [
            dict(p)
            for p in self.pulls.get(repo, [])
            if (head is None or p["head"]["label"] == head)
            and (state == "all" or p["state"] == state)
        ]
        return 200, {}, found

    def _create_pull(self, repo: str, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        head, base = body.get("head"), body.get("base")
        if not isinstance(head, str) or not isinstance(base, str) or not body.get("title"):
            return _error(422, "Validation Failed")
        owner = repo.split("/")[0]
        label = head if ":" in head else f"{owner}:{head}"
        if any(
            p["head"]["label"] == label and p["state"] == "open" for p in self.pulls.get(repo, [])
        ):
            return _error(422, f"A pull request already exists for {label}.")
        pulls = self.pulls.setdefault(repo, [])
        number = len(pulls) + 1
        pull = {
            "id": self._new_id(),
            "number": number,
            "state": "open",
            "draft": bool(body.get("draft", False)),
            "title": body["title"],
            "body": body.get("body"),
            "head": {"label": label, "ref": label.split(":", 1)[1]},
            "base": {"label": f"{owner}:{base}", "ref": base},
            "url": f"{self.url}/repos/{repo}/pulls/{number}",
            "html_url": f"{self.html_base}/{repo}/pull/{number}",
        }
        pulls.append(pull)
        return 201, {}, dict(pull)

    def _update_pull(
        self, repo: str, number: int, body: dict[str, Any]
    ) -> tuple[int, dict[str, str], Any]:
        for pull in self.pulls.get(repo, []):
            if pull["number"] == number:
                for key in ("title", "body", "state"):
                    if key in body:
                        pull[key] = body[key]
                if "base" in body:
                    pull["base"] = {
                        "label": f"{repo.split('/')[0]}:{body['base']}",
                        "ref": body["base"],
                    }
                return 200, {}, dict(pull)
        return _error(404, "Not Found")


def _seed_number(server: ScriptedServer, repo: str) -> int:
    # Issues and pull requests share one number sequence per repository, as on GitHub.
    taken = [i["number"] for i in server.issues.get(repo, [])]
    taken += [p["number"] for p in server.pulls.get(repo, [])]
    return max(taken, default=0) + 1


def _error(status: int, message: str) -> tuple[int, dict[str, str], Any]:
    return status, {}, {"message": message, "documentation_url": DOCS}
