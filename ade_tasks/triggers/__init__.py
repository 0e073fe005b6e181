"""Trigger matching: which of a rule's triggers an event starts, and the local events (lanes)
that are matched and dispatched without passing through ingress.

One module per trigger family behind the `Matcher` protocol (`base.py`), looked up by trigger kind
in `registry.py`; `ingress_events.py` (stored ingress events, on a worker) and `local_events.py`
ask the registry instead of branching on the kind. Each trigger model's kind is declared once, as a
`registry.TriggerKind` (its matcher, its follow-on events and its readiness check, `readiness.py`:
can the trigger fire, which rule health, `health.py`, reports), and added by one
`registry.register(kind)` line, the built-in ones included.
Schedules are claimed by the beat (`ade_tasks.schedule.scheduler`) and manual runs are dispatched
by the API, so neither needs a matcher.

Above `ade_tasks.ingress` (the normalized event, GitHub's payloads, the stored events),
`ade_tasks.runs`, `ade_tasks.rules` and `ade_tasks.db`; ingress never imports this room.
"""
