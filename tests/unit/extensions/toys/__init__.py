"""Toy extensions, one module each: what a contributor writes to add an action type, a trigger
kind or a guardrail (`tests/unit/extensions/test_toy_extensions.py` registers them, one line each)."""
