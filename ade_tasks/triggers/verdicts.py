"""What matching one event made of each rule: the verdicts an ingress event keeps, so an
operator can answer "why did nothing run?" (`ade-tasks events show`, the API, the web page).

Every candidate rule gets a verdict (a trigger of the event's type, indexed under a key the
event carries or none: `ade_tasks.db.rule_index`): `matched` (the run it started),
`skipped` (a guardrail or the overlap policy recorded its run skipped, with why), `refused`
(which filter of which trigger said no, and what it saw: `base.Refusal`), `paused` (by whom,
with the note), `disabled`, `untrusted` (its shared rules file is not trusted), `kill-switch`
(automations are disabled on the cluster) or `not-admitted` (dispatch refused it otherwise, say
the rule was deleted meanwhile). Rules without a trigger of the event's type, or whose triggers
are narrowed to another hook or repository (or follow other rules by name), are no candidates
and get none: nothing is read or computed for them, so matching costs what its candidates do.

The stored record is bounded whatever the number of rules: at most `MAX_SHOWN` verdicts (the
rules that passed their filters first, then refusals, then disabled rules), each reason cut
to `MAX_REASON` characters; `counts` has every verdict's total and `left_out` how many were
not kept.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from ade_tasks.errors import AdeError, AdmissionError
from ade_tasks.json_document import JsonObject
from ade_tasks.states import RunStatus

if TYPE_CHECKING:  # the CLI reads `summary` without loading the database layer
    from ade_tasks.runs.dispatch_results import DispatchResult
    from ade_tasks.triggers.matcher import Refusal

MAX_SHOWN = 50
MAX_REASON = 300


class Verdict(StrEnum):
    """What became of one rule for one event (the wire values)."""

    MATCHED = "matched"
    SKIPPED = "skipped"
    REFUSED = "refused"
    PAUSED = "paused"
    DISABLED = "disabled"
    UNTRUSTED = "untrusted"
    KILL_SWITCH = "kill-switch"
    NOT_ADMITTED = "not-admitted"


#: Verdicts of rules whose filters accepted the event, shown before the refusals.
_ADMISSION = frozenset(Verdict) - {Verdict.REFUSED, Verdict.DISABLED}


@dataclass
class MatchReport:
    """The verdicts of one event's matching, collected as matching and dispatch go on.

    `event_type` is the stored event's trigger type; verdicts about the further events it
    stands for (a merged pull request's `lane.merged`) name their own type."""

    event_type: str
    counts: Counter[str] = field(default_factory=Counter)
    #: Kept verdicts by rank (admission outcomes, refusals, disabled rules), each at most
    #: `MAX_SHOWN`: adding one costs the same however many rules there are.
    _kept: tuple[list[JsonObject], ...] = field(default_factory=lambda: ([], [], []))

    def refused(self, event_type: str, rule_id: str, index: int, refusal: Refusal) -> None:
        """Trigger `index` of the rule did not start: its filter refused the event."""
        self._add(event_type, Verdict.REFUSED, rule_id, trigger=index,
                  filter=refusal.filter, reason=refusal.reason)  # fmt: skip

    def disabled(self, event_type: str, rule_id: str) -> None:
        """The rule has a trigger of the type but is disabled (its filters were not run)."""
        self._add(event_type, Verdict.DISABLED, rule_id)

    def dispatched(
        self,
        event_type: str,
        rule_id: str,
        indexes: tuple[int, ...],
        result: DispatchResult | AdeError,
    ) -> None:
        """The rule's triggers `indexes` accepted the event; dispatch gave `result`."""
        trigger = indexes[0] if indexes else None
        if isinstance(result, AdeError):
            kind = result.kind if isinstance(result, AdmissionError) else Verdict.NOT_ADMITTED
            self._add(event_type, Verdict(kind), rule_id, trigger=trigger, reason=result.message)
            return
        run = result.run
        if run.status == RunStatus.SKIPPED:
            self._add(event_type, Verdict.SKIPPED, rule_id, trigger=trigger, run=run.id,
                      reason=run.error)  # fmt: skip
            return
        earlier = None if result.created else "a run for this event existed already (a redelivery)"
        self._add(event_type, Verdict.MATCHED, rule_id, trigger=trigger, run=run.id,
                  reason=earlier)  # fmt: skip

    def to_json(self, note: str | None = None) -> JsonObject:
        """The record the event keeps (`ingress_events.matching`)."""
        kept = [entry for rank in self._kept for entry in rank][:MAX_SHOWN]
        total = sum(self.counts.values())
        record: JsonObject = {
            "rules": kept,
            "counts": dict(self.counts),
            "left_out": total - len(kept),
        }
        if note is None and not total:
            note = f"no enabled rule has a trigger of type {self.event_type}"
        if note:
            record["note"] = note
        return record

    def _add(self, event_type: str, verdict: Verdict, rule_id: str, **fields: object) -> None:
        self.counts[verdict.value] += 1
        # Admission outcomes rank before refusals before disabled rules; within a rank, first
        # come first kept, so a flood of refusals never pushes out the rule that ran.
        kept = self._kept[0 if verdict in _ADMISSION else 1 if verdict is Verdict.REFUSED else 2]
        if len(kept) >= MAX_SHOWN:
            return
        entry: JsonObject = {"rule": rule_id, "verdict": verdict.value}
        if event_type != self.event_type:
            entry["event"] = event_type
        for name, value in fields.items():
            if value is not None:
                entry[name] = value[:MAX_REASON] if isinstance(value, str) else value
        kept.append(entry)


def summary(record: Mapping[str, Any] | None) -> str:
    """A stored matching record in a few words, for lists: `matched 1, refused 3`, `held (kill
    switch)`, `no candidate rule`, or `-` when none was recorded."""
    if not record:
        return "-"
    if record.get("held"):
        return "held (kill switch)"
    counts = record.get("counts") or {}
    return ", ".join(f"{name} {count}" for name, count in counts.items()) or "no candidate rule"
