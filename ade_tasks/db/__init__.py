"""Persistence: SQLAlchemy models, engines, migrations, query functions per aggregate.

Query functions take a session first and never commit: the edge owns the transaction.
"""
