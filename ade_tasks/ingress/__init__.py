"""Webhook and event ingress: normalizing deliveries (GitHub, custom hooks, local git and file
events, GitHub polling) and storing them for the workers. Which rules a stored event starts is
`ade_tasks.triggers.ingress_events`, above this room; a hook's configuration and signature checks
are `ade_tasks.hooks`, below it."""
