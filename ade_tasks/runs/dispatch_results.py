"""What dispatch (`ade_tasks.runs.dispatch`) gives back for a trigger it admitted."""

from __future__ import annotations

from dataclasses import dataclass

from ade_tasks.db.schema import RunRow


@dataclass(frozen=True)
class DispatchResult:
    """The run a trigger produced, whether this call created it, and whether it was sent."""

    run: RunRow
    created: bool
    sent: bool
    send_error: str | None = None
