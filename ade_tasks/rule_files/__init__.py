"""Rules from files into the database: a rules directory synced from disk (`sync`) or pushed
through the API (`push`), each as one unit of work over `ade_tasks.db.rule_sync`.

Above `ade_tasks.db` and `ade_tasks.rules` (the rule models and the loader, which import no
database code); the CLI, the API and `dev` call it."""
