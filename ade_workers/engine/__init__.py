"""The run engine: execute one run's steps under its lease, its guardrails and its containment.

`runner` claims a run and drives its chain (`chain`) of actions (`ade_workers.actions`) and agent
sessions (`ade_workers.agents`), each command in a container of its own
(`ade_workers.containment`); `publish` delivers the outcome and `cleanups` deletes lanes that came
due. No Celery here: a task in `ade_workers.celery` hands the engine a run id. May import
`ade_tasks`, `ade_workers.actions`, `ade_workers.agents`, `ade_workers.containment` and
`ade_workers.integrations`.
"""
