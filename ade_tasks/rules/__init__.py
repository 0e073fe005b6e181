"""Rules: the validated rule document (one module per concept: base, triggers, agent, steps,
guardrails, outputs, rule) and the YAML files it comes from (loader, sync). The package itself
imports nothing, so any of its modules can be imported first."""
