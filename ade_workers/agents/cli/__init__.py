"""CLI agents: Claude Code and Codex run as the real CLIs, bounded by the engine.

`cli_session.run_cli_session` runs one session through the CLI's driver (`CLI_DRIVERS`:
`claude_driver`, `codex_driver`), each answering the CLI's own protocol: Claude Code's PreToolUse
hook (`claude_hook`, `claude_calls`) through the worker's `decision_server`, Codex's app-server
JSON-RPC (`codex_app_server`, `codex_rpc`, `codex_requests`, `codex_home`). Claude Code reaches the
engine's own tools (github, notify) through the `ade` MCP server `mcp_bridge`, which passes each
call to the worker's `tool_bridge`. Both talk to their model through `model_proxy`, which holds
the real key. `facts` is the pure part (capabilities, the
stream-json parser, the providers report); `outcome` what every session ends with; `setup` what
the engine gives a session. May import `ade_tasks`, `ade_workers.engine` (containment) and the
rest of `ade_workers.agents`.
"""
