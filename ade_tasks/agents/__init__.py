"""AI agent sessions: what the engine lets an agent see and do, decided without the model.

The permission policy, the protected paths, tool names and prompt rendering, shared by the HTTP
tool loop and the CLI agents in `ade_workers.agents`. May import the rule models, settings and
templating; never the database nor the workers.
"""
