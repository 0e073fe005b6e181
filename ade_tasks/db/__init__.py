"""Persistence: SQLAlchemy models, engines, migrations, query functions per aggregate.

Query functions take a session first and never commit: the edge owns the transaction. Every write
of run, step, approval and rule state happens here, each run status change through
`ade_tasks.states.RUN_MOVES`. May import the leaves of `ade_tasks` (clock, errors, roles, states)
and the rule models; nothing above it (runs, schedule, triggers, ingress import this room).
"""
