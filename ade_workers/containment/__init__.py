"""Containment: every command a step or an agent starts runs in a container of its own, as the
agent user when the operator names one.

`process.run_process` runs a command with a deadline, capped and masked output and a clean kill;
`contained_process` hands it to a supervisor (`supervisor`: nothing the command starts can leave,
nothing outlives the worker) and keeps the idle supervisors of a worker process; `agent_user`
leases the unprivileged user agent sessions run as. Below `engine`, `actions` and `agents`, which
all use it; it imports only `ade_tasks` and `ade_workers.sandbox`, and none of them back.
"""
