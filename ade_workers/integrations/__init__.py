"""Integrations: how the workers talk to services outside the cluster (GitHub, model providers,
notify webhooks). `http.py` is the one HTTP client they share and the one error pair they raise.

This package imports only `ade_tasks` (errors, retry policy) and httpx, so any integration may
import it and it imports none of them back.
"""
