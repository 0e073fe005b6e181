"""ADE Tasks edges: the HTTP API and web page (`http`), the `ade-tasks` CLI and the embedded dev
stack (`cli`), and the relay's public side (`relay`). May import `ade_tasks` and `ade_workers`;
nothing imports this package back.
"""
