"""ADE Tasks domain and persistence: rules, runs, dispatch. Never imports celery or fastapi."""
