"""Who may act and who acted: the roles an API token can have (`roles`) and the actor a run,
an approval or the audit log records (`actors`). Imports nothing else of `ade_tasks`, so the CLI
names the roles without loading the database."""
