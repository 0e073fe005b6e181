"""Rules: the validated rule document (one module per concept: document, triggers, agent, steps,
guardrails, outputs, rule), the checks it runs when admitted (ade_actions, tool_names,
approval_policy) and the YAML files it comes from (loader). Imports no database code: syncing
files into the database is `ade_tasks.rule_files`. The package itself imports nothing, so any of
its modules can be imported first."""
