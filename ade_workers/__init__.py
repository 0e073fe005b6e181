"""ADE Tasks workers: the Celery glue (`celery`), the run engine (`engine`), its actions
(`actions`) and agent sessions (`agents`), and the outside services they talk to
(`integrations`). May import `ade_tasks`; never `ade_api`.
"""
