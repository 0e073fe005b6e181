"""`ade-tasks relay serve`: the public ingress of a cluster GitHub cannot reach.

A FastAPI app of its own that verifies deliveries with the cluster's code and keeps them in
`ade_tasks.relay`'s store; may import `ade_tasks` and `ade_api.http`'s shared edge pieces.
"""
