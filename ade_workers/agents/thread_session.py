"""An agent step's durable thread (`thread:`): what the session is given of the thread's earlier
sessions when it starts, and what it adds to the thread when it ends.

When it starts (`open_thread`), the step's key is rendered and checked, and the thread's newest
entry id is recorded as an `agent.thread` run event with the runs it continues. A resumed attempt
(worker killed, approval answered) reads that event and rebuilds the same continuation from the
entries up to that id, so the conversation a model sees never changes under it.

When it ends (`close_thread`), with any status but `waiting` (completed, failed, timed out, over a
budget, cancelled), its conversation, rebuilt from the step's recorded `agent.*` events of every
attempt, is appended to the thread in the same transaction as an `agent.thread_saved` event, so a
step run again after its end was recorded never appends twice. A worker killed mid-session stores
nothing then: the resumed attempt stores the whole conversation (the killed attempt's turns are
in the run's events) once it ends; a run that is never resumed leaves only its run events.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ade_tasks.agents.prompt import RenderedPrompt
from ade_tasks.agents.threads import (
    Continuation,
    bound_entry,
    check_key,
    continuation,
    turns_of,
)
from ade_tasks.db import run_events as run_events_db
from ade_tasks.db import threads as threads_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.threads import THREAD_EVENT
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.steps import AgentSessionStep
from ade_tasks.templating import TemplateContext, render

SAVED_EVENT = "agent.thread_saved"


@dataclass(frozen=True)
class OpenThread:
    """The thread a session continues: where it is stored and what the session is given."""

    project: str
    key: str
    continuation: Continuation


def open_thread(
    sessions: SessionFactory,
    action: AgentSessionStep,
    run_id: str,
    project: str,
    template: TemplateContext,
) -> OpenThread | None:
    """The step's thread and its continuation (None: the step has no `thread:`); records the
    `agent.thread` event on the session's first attempt. ThreadKeyError / TemplateError for a
    key that cannot name a thread."""
    if action.thread is None:
        return None
    where = f"step {action.id!r} thread"
    key = check_key(render(action.thread, template, where), where)
    with sessions.begin() as session:
        started = [
            data
            for kind, data in run_events_db.events_of(session, run_id, THREAD_EVENT)
            if kind == THREAD_EVENT and data.get("step") == action.id
        ]
        if started:
            up_to = int(started[-1]["up_to"])
        else:
            up_to = threads_db.newest_id(session, project, key)
        cont = continuation(key, threads_db.entries_of(session, project, key, up_to))
        if not started:
            data: JsonObject = {
                "step": action.id,
                "key": key,
                "project": project,
                "up_to": up_to,
                "continues": list(cont.runs),
                "verbatim_turns": len(cont.turns),
                "digest_sessions": len(cont.digest),
                "tainted_runs": list(cont.tainted_runs),
            }
            run_events_db.append_event(session, run_id, THREAD_EVENT, data)
    return OpenThread(project, key, cont)


def tainted_by(prompt: RenderedPrompt, thread: OpenThread | None) -> RenderedPrompt:
    """The prompt, tainted also when the thread it continues holds outsiders' text."""
    if thread is None or not thread.continuation.tainted_runs:
        return prompt
    runs = ", ".join(thread.continuation.tainted_runs)
    reason = f"thread {thread.key!r} continues sessions that read outsiders' text (runs {runs})"
    return replace(prompt, tainted=True, reasons=(*prompt.reasons, reason))


def close_thread(
    sessions: SessionFactory,
    thread: OpenThread | None,
    *,
    run_id: str,
    step_id: str,
    rule_id: str,
    prompt: RenderedPrompt,
    status: str,
    summary: str,
) -> None:
    """Append the ended session's conversation to its thread (once per step)."""
    if thread is None or status == "waiting":
        return
    with sessions.begin() as session:
        events = [
            (kind, data)
            for kind, data in run_events_db.events_of(session, run_id, "agent.")
            if data.get("step", step_id) == step_id
        ]
        if any(kind == SAVED_EVENT for kind, _ in events):
            return
        entry = threads_db.NewEntry(
            project=thread.project,
            key=thread.key,
            run_id=run_id,
            step_id=step_id,
            rule_id=rule_id,
            status=status,
            summary=summary,
            tainted=prompt.tainted,
            turns=bound_entry(turns_of(prompt.text, events)),
        )
        entry_id = threads_db.append_entry(session, entry)
        saved = {"step": step_id, "key": thread.key, "entry": entry_id}
        run_events_db.append_event(session, run_id, SAVED_EVENT, saved)
