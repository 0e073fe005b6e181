"""The agent providers a rule may name (`execution.provider`), one module each, as the domain
knows them: each module's `PROVIDER` (an `AgentProvider`) and one line in `registry`. What runs
a provider's sessions is registered apart, in `ade_workers/agents/providers/registry.py`."""
