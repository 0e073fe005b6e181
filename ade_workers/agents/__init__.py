"""AI agent sessions on the worker: the engine's own tools, run inside the run's worktree."""
