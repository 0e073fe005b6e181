"""ADE Tasks edges: the HTTP API and web page (`http`), the `ade-tasks` CLI and the embedded dev
stack (`cli`), the relay's public side (`relay`) and the scripted model of `ade-tasks dev-model`
(`dev_model`). Imports go from the CLI to the relay to the HTTP edge, never back
(tests/unit/architecture/test_room_contracts_workers_api.py). May import `ade_tasks` and
`ade_workers`; nothing imports this package back.
"""
