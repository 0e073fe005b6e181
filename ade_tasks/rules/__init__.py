"""Rules: the validated rule document and the YAML files it comes from."""

from ade_tasks.rules.models import Rule, TriggerType

__all__ = ["Rule", "TriggerType"]
