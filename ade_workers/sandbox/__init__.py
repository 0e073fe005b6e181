"""The OS sandbox under every agent and command process: bubblewrap namespaces no CLI quirk
can get under.

The engine's policy (asks, approvals, taint, denied tools) is the first layer; this is the floor
beneath it. An agent CLI with its hooks and tools, an HTTP session's `bash`, and the commands of
`run-command` and `run-tests` steps (`engine.command_sandbox`: the network and git access their
rule gives them, an empty `$HOME`) run inside a
`bwrap` sandbox (`layout.Sandbox`) that sees the worktree, a private home and tmp, read-only
system directories and the CLI's install, and nothing of the engine: its source, virtualenv,
data directory and token files are hidden even where they lie inside a bound directory. Its PID
namespace dies with its first process, so nothing it started outlives it, even after it killed
its own parent; its network namespace holds only a loopback on which the engine's model proxy is
forwarded in through a Unix socket (`forward`, `bridge`).

`host.require_sandbox` checks once per process that a sandbox can be made here and says what
the host needs when not; `ADE_SANDBOX=off` is the admin's opt-out, named in every capability
report. `helpers` keeps engine-owned, hash-checked copies of the programs a sandbox runs on the
engine's behalf (Claude's hook, the forwarder, the command supervisor), so no agent can rewrite
what later runs for the engine.

Standard library only below the engine: `forward.py` also runs inside the sandbox as
`python -I -S forward.py`.
"""
