"""Cron time math: which UTC minutes a schedule trigger names, apart from the database and the
beats so the rule models can check a trigger with it.

`grammar` is the cron grammar, `zones` a zone's offset spans, `evaluator` the one evaluator of a
trigger's slots (day rule and DST policy), `legacy` what changed for crons stored by earlier
versions; `slots` shares the evaluator's walks among triggers. Imports only the basics of
`ade_tasks` (errors, durations); `ade_tasks.rules` and `ade_tasks.schedule` build on it.
"""
