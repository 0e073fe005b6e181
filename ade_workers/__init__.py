"""ADE Tasks workers: the Celery glue (`celery`), the run engine (`engine`), its actions
(`actions`) and agent sessions (`agents`), the containers their commands run in
(`containment`, over the OS `sandbox`), and the outside services they talk to (`integrations`).
Imports go down that list, never back
(tests/unit/architecture/test_room_contracts_workers_api.py). May import `ade_tasks`; never
`ade_api`.
"""
