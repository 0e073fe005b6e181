"""How GitHub's REST API lists things, for the scripted GitHub: `since`, `sort` and `direction`,
and pages with a Link header (`per_page`, `page`; the links keep the request's other query)."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from tests.scripted_http import RecordedRequest


def instant(value: str) -> datetime:
    """GitHub's ISO 8601 timestamp ("...Z") as an aware datetime."""
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def since_filter(items: list[dict[str, Any]], request: RecordedRequest) -> list[dict[str, Any]]:
    """The items updated at or after the request's `since` (all of them without one)."""
    since = request.query.get("since", [None])[0]
    if since is None:
        return list(items)
    start = instant(since)
    return [item for item in items if instant(item["updated_at"]) >= start]


def sorted_items(items: list[dict[str, Any]], request: RecordedRequest) -> list[dict[str, Any]]:
    """The items in the request's `sort` (created, updated) and `direction` (desc), ties by id."""
    key = request.query.get("sort", ["created"])[0]
    key = "updated_at" if key == "updated" else "created_at"
    reverse = request.query.get("direction", ["desc"])[0] != "asc"
    return sorted(items, key=lambda item: (instant(item[key]), item["id"]), reverse=reverse)


def paginate(
    base_url: str, request: RecordedRequest, items: list[dict[str, Any]]
) -> tuple[int, dict[str, str], Any]:
    """One page of `items` with GitHub's Link header; the links keep the request's query."""
    per_page = min(int(request.query.get("per_page", ["30"])[0]), 100)
    page = int(request.query.get("page", ["1"])[0])
    last = max((len(items) + per_page - 1) // per_page, 1)
    query = {k: v[0] for k, v in request.query.items() if k != "page"}
    base = f"{base_url}{request.path}"
    links = []
    if page < last:
        links.append(f'<{base}?{urlencode({**query, "page": page + 1})}>; rel="next"')
        links.append(f'<{base}?{urlencode({**query, "page": last})}>; rel="last"')
    if page > 1:
        links.append(f'<{base}?{urlencode({**query, "page": 1})}>; rel="first"')
    headers = {"Link": ", ".join(links)} if links else {}
    chunk = items[(page - 1) * per_page : page * per_page]
    return 200, headers, [dict(item) for item in chunk]
