"""AI agent sessions on the worker: the tool loop with an HTTP model provider (`http_session`,
`tools/`, `providers/`) and the CLI agents (`cli/`). The `agent-session` step that runs them is an
action (`ade_workers.actions.agent_session`).

May import `ade_tasks`, `ade_workers.containment`, `ade_workers.sandbox` and
`ade_workers.integrations`; never `ade_workers.actions` or `ade_workers.engine`, which stand above
it, nor the Celery glue.
"""
