"""The `notify` palette: one tool posting a message to the rule's notify webhook
(`outputs.notify_url`, a secret the agent never sees), through the same client as the
`notify` disposition. A rule that chooses the palette without a notify URL is refused when it
is loaded; a webhook cannot be searched, so a `notify` call interrupted by a crash is reported
unknown rather than sent again."""

from __future__ import annotations

import time

from ade_tasks.errors import AdeError
from ade_tasks.json_document import JsonObject
from ade_tasks.retry import RetryPolicy
from ade_workers.agents.tools.tool import STRING, ToolContext, ToolError, ToolResult, ToolSpec, spec
from ade_workers.integrations.notify import send_notification

TEXT_CAP = 4_000
"""Characters one notification may carry."""
POLICY = RetryPolicy(attempts=3)


def notify(args: JsonObject, ctx: ToolContext) -> ToolResult:
    """Post a short message to the rule's notify webhook."""
    text = str(args["text"]).strip()
    if not text:
        raise ToolError("text is empty; say what the people watching should know")
    if len(text) > TEXT_CAP:
        raise ToolError(f"text has {len(text)} characters; keep it under {TEXT_CAP}")
    if ctx.run is None or not ctx.run.notify_url:
        raise ToolError("this rule has no notify webhook (outputs.notify_url); nothing was sent")
    marker = f"run {ctx.run.run_id} call {ctx.call_id or 'none'}"
    deadline = time.monotonic() + max(min(ctx.time_left(), 60.0), 0.0)
    try:
        send_notification(ctx.run.notify_url, text, marker=marker, policy=POLICY, deadline=deadline)
    except AdeError as exc:
        raise ToolError(exc.message) from None
    return ToolResult(True, f"notification sent ({len(text)} characters)", {"sent": True})


SPECS: dict[str, ToolSpec] = {
    "notify": spec(
        "Post a short message to the team's notification channel (the rule's webhook).",
        ["text"],
        text=STRING,
    ),
}
"""The spec of `notify`, as providers send it to the model."""
