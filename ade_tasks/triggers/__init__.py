"""Trigger matching: which of a rule's triggers an event starts, and the local events (lanes)
that are matched and dispatched without passing through ingress.

One module per trigger family behind the `Matcher` protocol (`base.py`), looked up by trigger kind
in `registry.py`; the ingress dispatcher and `local_events.py` ask the registry instead of branching
on the kind. `registry.KINDS` declares each trigger model's kind once: its matcher, its follow-on
events and its readiness check (`readiness.py`: can the trigger fire, which rule health reports).
Schedules are claimed by the beat (`ade_tasks.schedule.scheduler`) and manual runs are dispatched
by the API, so neither needs a matcher.

May import the rule models (`ade_tasks.rules`), the normalized event (`ade_tasks.ingress.event`)
and the event types polling infers (`ade_tasks.ingress.poller`), globs and patterns,
`ade_tasks.runs.dispatch` and the query functions in `ade_tasks.db`; never the ingress
dispatcher, which imports this package.
"""
