"""Is the cluster's GitHub token usable, and does it carry the scopes the engine needs?

One `GET /user` against `ADE_GITHUB__API_URL` with the token proves it is accepted and names its
owner. A classic personal access token lists its scopes in the `X-OAuth-Scopes` header; the
engine writes to repositories (comments, labels, review replies, re-run checks, pushes to a PR's
branch, draft PRs), which for a classic token takes `repo` (`public_repo` reaches public
repositories only). `workflow` is needed too when a push changes `.github/workflows/`: without it
GitHub refuses such a push, so its absence is said, not failed.

A fine-grained token or a GitHub App's token has no `X-OAuth-Scopes` header, and GitHub offers no
call that lists its permissions: the doctor says which repository permissions it needs instead.
"""

from __future__ import annotations

from collections.abc import Iterable

from ade_tasks.retry import RetryPolicy
from ade_tasks.settings import GithubSettings
from ade_workers.doctor.check import Finding, Verdict
from ade_workers.integrations.github import API_VERSION
from ade_workers.integrations.http import (
    IntegrationClient,
    IntegrationError,
    IntegrationUnavailableError,
)

#: Classic scopes the engine's GitHub writes need (`repo` includes `public_repo`).
REQUIRED_SCOPES = ("repo",)
#: Scopes that only some pushes need: said when missing, not a failure.
OPTIONAL_SCOPES = {"workflow": "a push that changes .github/workflows/ is refused without it"}
#: Repository permissions a fine-grained or GitHub App token needs for the same work.
FINE_GRAINED_PERMISSIONS = (
    "Contents: read and write (push commits, draft PRs)",
    "Pull requests: read and write (read PRs, reply to and resolve review threads)",
    "Issues: read and write (comments, labels)",
    "Checks: read and write, Actions: read and write (read failed checks, re-run them)",
    "Metadata: read",
)
NEW_TOKEN = (
    "create a token (classic: scope `repo`; fine-grained: the repository permissions "
    "`ade-tasks doctor` lists) and set ADE_GITHUB__TOKEN on the API, workers and beats"
)


def parse_scopes(header: str | None) -> frozenset[str] | None:
    """The scopes of an `X-OAuth-Scopes` header; None when there is none (not a classic token)."""
    if header is None:
        return None
    return frozenset(scope.strip() for scope in header.split(",") if scope.strip())


def judge_scopes(login: str, scopes: frozenset[str] | None) -> Finding:
    """The verdict on a token GitHub accepted for `login`, from its scopes."""
    if scopes is None:
        return Finding(
            Verdict.OK,
            f"token of {login} accepted; it is a fine-grained or GitHub App token, whose "
            "permissions GitHub does not list: it needs, on each repository rules act on, "
            + "; ".join(FINE_GRAINED_PERMISSIONS),
        )
    missing = [scope for scope in REQUIRED_SCOPES if scope not in scopes]
    shown = ", ".join(sorted(scopes)) or "none"
    if missing:
        partial = " (`public_repo` reaches public repositories only)" * ("public_repo" in scopes)
        return Finding(
            Verdict.FAIL,
            f"token of {login} lacks the scope {', '.join(missing)}{partial}; its scopes: {shown}. "
            "Comments, labels, review replies, re-runs and pushes would be refused (403)",
            f"add the scope {', '.join(missing)} to the token (GitHub: Settings > Developer "
            f"settings > Personal access tokens), or {NEW_TOKEN}",
        )
    notes = [f"without `{scope}`: {why}" for scope, why in _absent(OPTIONAL_SCOPES, scopes)]
    return Finding(
        Verdict.OK,
        f"token of {login} accepted, scopes: {shown}" + "".join(f"; {n}" for n in notes),
    )


def check_token(github: GithubSettings, timeout: float) -> Finding:
    """`GET /user` with the configured token, and the verdict on its scopes."""
    if github.token is None:
        return Finding(
            Verdict.WARN,
            "ADE_GITHUB__TOKEN is not set: github.* ade-actions, run comments and the agents' "
            "GitHub tools cannot call GitHub (webhooks still arrive)",
            f"if rules act on GitHub, {NEW_TOKEN}",
        )
    token = github.token.get_secret_value()
    client = IntegrationClient(
        "GitHub",
        github.api_url,
        url_fix="check ADE_GITHUB__API_URL",
        timeout=timeout,
        policy=RetryPolicy(attempts=1),
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": API_VERSION,
        },
        secrets=[token],
    )
    with client:
        try:
            response = client.send("GET", "/user", deadline=None, advice=_advice)
        except IntegrationError as exc:
            fix = NEW_TOKEN if exc.status == 401 else "check ADE_GITHUB__API_URL and the token"
            return Finding(Verdict.FAIL, exc.message, fix)
        except IntegrationUnavailableError as exc:
            return Finding(
                Verdict.FAIL,
                exc.message,
                "check that ADE_GITHUB__API_URL is right and reachable from this host",
            )
    body = response.json() if response.content else {}
    login = body.get("login", "an unnamed account") if isinstance(body, dict) else "?"
    return judge_scopes(str(login), parse_scopes(response.headers.get("x-oauth-scopes")))


def _absent(wanted: dict[str, str], scopes: frozenset[str]) -> Iterable[tuple[str, str]]:
    return ((scope, why) for scope, why in wanted.items() if scope not in scopes)


def _advice(status: int) -> str:
    if status == 401:
        return "the token is wrong, expired or revoked"
    if status == 403:
        return "the token may not call GET /user, or a rate limit applies; try again later"
    return "check ADE_GITHUB__API_URL (GitHub Enterprise: https://HOST/api/v3)"
