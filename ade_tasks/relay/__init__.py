"""The relay: verified deliveries kept outside the firewall, and the cluster's drain of them.

The relay's own store and wire format (used by `ade_api.relay`), and the drain's cursor and
poison rules (used by the beats' drain in `ade_workers.celery`). May import `ade_tasks.db`,
`ade_tasks.ingress` (a drained delivery takes the same intake as a direct one) and `ade_tasks.runs`.
"""
