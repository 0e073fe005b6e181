"""ADE Tasks workers: the Celery app, thin tasks, the run executor and its actions."""
