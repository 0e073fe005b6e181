"""Schedules: cron slots and one-shot runs, claimed in the database so that any number of beats fire
each occurrence once, and backfill of the slots a range missed.

What a cron expression means and which minutes it names is `ade_tasks.cron`, below this room and
the rules; `scheduler` claims and dispatches the due slots; `one_shots` the runs that fire once;
`backfill` the past slots. May import the rest of
`ade_tasks`; never Celery (the beat in `ade_workers.celery.beat` drives this room).
"""
