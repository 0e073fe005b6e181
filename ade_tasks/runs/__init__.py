"""Runs: the one dispatch function every trigger calls, and what happens to a run outside its
execution: operators' answers to pending inputs, the review queue, the recovery sweep.

The run and step states and their allowed moves are in `ade_tasks.states`; the rows in
`ade_tasks.db`. May import the rest of `ade_tasks`; never Celery nor FastAPI.
"""
