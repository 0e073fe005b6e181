"""How the CLI prints a step's start and end and a run's approvals, shared by `run --wait`,
`runs events`, `runs show` and `runs approve` (a module of its own: command modules do not
import each other)."""

from __future__ import annotations

from ade_tasks.json_document import JsonObject


def _step_label(data: JsonObject) -> str:
    return f"step {int(data['index']) + 1} {data['step_id']} ({data['action_type']})"


def step_line(kind: str, data: JsonObject) -> list[str]:
    """The progress lines of a `step.started` / `step.finished` event: what happened, and
    why (the error of a step that did not succeed, the reason a step was skipped)."""
    if kind == "step.started":
        return [f"  {_step_label(data)} started"]
    status = str(data["status"])
    exit_code = f", exit {data['exit_code']}" if data.get("exit_code") is not None else ""
    why = data.get("reason") or (data.get("error") if status != "succeeded" else None)
    if not why:
        outcome = f"{status}{exit_code}"
    elif str(why).startswith(status) and not exit_code:  # "cancelled by ops", not twice
        outcome = str(why)
    else:
        outcome = f"{status}{exit_code}: {why}"
    lines = [f"  {_step_label(data)} {outcome}"]
    tail = (data.get("output_tail") or "").splitlines()
    return lines + [f"      | {line}" for line in tail]


def capped_line(cap: int, then: str) -> str:
    """What a follower prints the moment a step's live output reaches its cap (the one event
    that carries `capped`): the step may print on, but nothing more of it comes live."""
    return f"[... live output stops at {cap} characters; {then}]"


class LiveLines:
    """A running step's `step.output` events as whole lines, for `run --wait`: text is held
    until its line ends, and the step's end takes what is left. At the cap, the held line is
    printed and a line says the output goes on unseen until the step's last lines."""

    def __init__(self) -> None:
        self._partial: dict[int, str] = {}
        self._capped: set[int] = set()

    def feed(self, index: int, data: JsonObject) -> list[str]:
        """The lines the event completes, each shown as output."""
        *complete, self._partial[index] = (self._partial.get(index, "") + data["text"]).split("\n")
        if data.get("capped") and index not in self._capped:
            self._capped.add(index)
            complete += [self._partial[index]] if self._partial[index] else []
            complete.append(capped_line(int(data["capped"]), "its last lines show when it ends"))
            self._partial[index] = ""
        return [f"      | {line}" for line in complete]

    def finished(self, data: JsonObject) -> list[str]:
        """The lines of a `step.finished` event: the step's last partial line if it streamed,
        then its status line; its output tail only if it did not stream (or hit the cap)."""
        index = int(data["index"])
        if index not in self._partial:
            return step_line("step.finished", data)
        rest = self._partial.pop(index)
        lines = [f"      | {rest}"] if rest else []
        status, *tail = step_line("step.finished", data)
        lines.append(status)
        if index in self._capped:
            self._capped.discard(index)
            lines.append("      | [... its last lines:]")
            lines += tail
        return lines


def approval_line(approval: JsonObject) -> str:
    """A run's approval on one line; a gate needing several approvals says how far it got."""
    decided = f" by {approval['decided_by']}" if approval["decided_by"] else ""
    line = f"approval before step {approval['step_index'] + 1}: {approval['status']}{decided}"
    needed, votes = approval.get("approvals_needed") or 1, approval.get("votes") or []
    if approval["status"] == "pending" and (needed > 1 or votes):
        approvers = ", ".join(vote["by"] for vote in votes) or "nobody yet"
        line += f" ({len(votes)} of {needed} approvals: {approvers})"
    if approval["status"] == "pending" and approval.get("excluded_approver"):
        line += f"; not by {approval['excluded_approver']}, who asked for the run"
    return line
