"""AI agent sessions on the worker: the `agent-session` step (`agent_run`), the tool loop with an
HTTP model provider (`session`, `tools/`, `providers/`) and the CLI agents (`cli/`).

May import `ade_tasks`, `ade_workers.actions` (the step's protocol), `ade_workers.engine`
(containment) and `ade_workers.integrations`; never the Celery glue.
"""
