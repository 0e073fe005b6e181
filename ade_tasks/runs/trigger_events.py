"""What every trigger path hands to dispatch (`ade_tasks.runs.dispatch`): the event that
happened, before any rule admitted it."""

from __future__ import annotations

from dataclasses import dataclass, field

from ade_tasks.json_document import JsonObject
from ade_tasks.rules.triggers import TriggerType


@dataclass(frozen=True)
class TriggerEvent:
    """What happened, as every trigger path describes it to dispatch."""

    type: str
    summary: str = ""
    payload: JsonObject = field(default_factory=dict)
    idempotency_key: str | None = None
    #: The rule's triggers this event matched (their indexes), so a paused trigger holds back
    #: only what it would fire; None when not known (a schedule names its own in the payload).
    trigger_indexes: tuple[int, ...] | None = None

    @classmethod
    def manual(
        cls,
        inputs: JsonObject | None = None,
        *,
        key: str | None = None,
        by: str = "",
        forced_by: str = "",
    ) -> TriggerEvent:
        """An operator's manual run; `forced_by` names the admin who forces it past the
        cluster's kill switch (the edge checks the role; the run records who)."""
        summary = f"manual run by {by}" if by else "manual run"
        payload: JsonObject = {"inputs": dict(inputs or {}), "requested_by": by}
        if forced_by:
            payload["forced_by"] = forced_by
        return cls(TriggerType.MANUAL, summary, payload, f"manual:{key}" if key else None)
