"""How the CLI prints a step's start and end, shared by `run --wait`, `runs events` and
`runs show` (a module of its own: the command modules import each other through `cli`)."""

from __future__ import annotations

from typing import Any


def _step_label(data: dict[str, Any]) -> str:
    return f"step {int(data['index']) + 1} {data['step_id']} ({data['action_type']})"


def step_line(kind: str, data: dict[str, Any]) -> list[str]:
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
