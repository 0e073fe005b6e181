"""`ade-tasks doctor`: checks of a cluster as an operator would make them by hand, each with
its verdict and what to do when it fails.

`check` holds the shapes (a verdict, a check, its result) and the runner that bounds every check
in time (a hung broker or database answers "no answer within N s", never hangs the doctor);
`checks` holds the checks themselves and `CHECKS`, the one ordered list of them; `github_token`
judges the GitHub token's scopes. Each check reuses the probe its layer already has (the
schema's `schema_lag`, the broker's `broker_reachable`, the heartbeats table, `providers_report`,
the sandbox's `sandbox_problem`, the integrations' HTTP client), so the doctor and the engine
agree on what "working" means.
"""
