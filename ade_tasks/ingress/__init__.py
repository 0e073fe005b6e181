"""Webhook and event ingress: normalizing deliveries and matching them to rules."""
