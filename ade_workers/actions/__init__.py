"""Action executors: one module per action type behind one protocol (`executor`), and the registry
of them (`registry`). The `agent-session` executor (`agent_session`) runs `ade_workers.agents`;
commands run in `ade_workers.containment`. Below `ade_workers.engine`, above `agents`. This package
imports nothing itself, so any module may import `executor`."""
