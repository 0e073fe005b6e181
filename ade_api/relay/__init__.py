"""`ade-tasks relay serve`: the public ingress of a cluster GitHub cannot reach."""
