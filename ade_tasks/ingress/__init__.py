"""Webhook and event ingress: verifying and normalizing deliveries (GitHub, custom hooks, local
git and file events, GitHub polling), storing them, and dispatching each stored event on a
worker. Which rules an event starts is asked of `ade_tasks.triggers`, which imports only the
normalized event and the hook filters from here."""
