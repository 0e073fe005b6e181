"""Guardrails the engine holds every run to: one module per guardrail behind the hooks of
`guardrail.Guardrail`, and `registry.GUARDRAILS`, the ordered tuple dispatch, the runner, agent
sessions and rule health iterate (adding a guardrail: one module declaring its hooks and what it
reads of a rule, and one line, `registry.register(MyGuardrail())`).

The overlap policy is not one of them: it does not admit or refuse a run on its own but shares
slots between the runs of a batch, buffers runs, cancels the runs in the way and releases
buffered runs when one ends, so it stays with its state in `ade_tasks.runs.dispatch`. Nor are
`allowed_paths` and `allowed_lanes`: they judge a lane's changed files and a step's lane name on
the worker, where the lane is (docs/guardrails.md says where each guardrail is held).

This package imports nothing itself; its modules import the rule models, `ade_tasks.db` query
functions and settings, never the engine that calls them.
"""
