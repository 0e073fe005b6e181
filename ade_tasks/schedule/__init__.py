"""Schedules: cron slots and one-shot runs, claimed in the database so that any number of beats fire
each occurrence once, and backfill of the slots a range missed.

`cron` is the grammar, `zones` a zone's offset spans, `evaluator` the one evaluator of a trigger's
slots (day rule and DST policy), `legacy` what changed for crons stored by earlier versions;
`slots` shares the evaluator's walks among triggers; `scheduler` claims and dispatches the due
slots; `one_shots` the runs that fire once; `backfill` the past slots. May import the rest of
`ade_tasks`; never Celery (the beat in `ade_workers.celery.beat` drives this room).
"""
