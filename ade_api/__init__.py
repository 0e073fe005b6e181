"""ADE Tasks edges: the HTTP API (FastAPI), the `ade-tasks` CLI and the embedded dev stack."""
