"""The engine's own agent tools, for HTTP providers: files, search, bash, a todo list, a report.

One module per tool family (`reading`, `writing`, `shell`, `notes`), each holding its tools and
their JSON-schema specs; `tool` is what every tool takes and returns, `worktree` how a tool
sees the worktree's paths, and `registry` the tools by name and `run_tool`, which the session
calls. Every path an agent names is resolved inside the worktree on real paths, the engine's
own data (`ProtectedPaths`) is refused and hidden, and all output passes the masker.

It re-exports nothing: import from the module. Its modules may import ade_tasks and
ade_workers' process and agent-user modules, never the session or a provider.
"""
