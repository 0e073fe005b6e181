"""How the CLI prints a rule's state and health (`rules list`, `rules show`): the API's
`pauses` and `health` fields in words. A rule from an API without health (an older cluster)
prints its trust state alone."""

from __future__ import annotations

from ade_tasks.json_document import JsonObject


def trust_line(rule: JsonObject) -> str | None:
    """The untrusted-config line of an API that reports no health."""
    if rule["trust_state"] == "trusted":
        return None
    return (
        f"untrusted shared config {rule['source_file']}: review it, then "
        f"`ade-tasks rules trust {rule['source_hash']}`"
    )


def state_word(rule: JsonObject) -> str:
    """`disabled`, `paused` (enabled, every automatic trigger held) or `enabled`."""
    if not rule["enabled"]:
        return "disabled"
    paused = any(p["trigger_index"] is None for p in rule.get("pauses") or ())
    return "paused" if paused else "enabled"


def pause_lines(rule: JsonObject) -> list[str]:
    """One line per pause: what it holds, who paused it, since when, the note, how to resume."""
    return [f"paused: {pause['message']}" for pause in rule.get("pauses") or ()]


def not_ready_lines(rule: JsonObject) -> list[str]:
    """One line per pause and per reason the rule cannot fire (none when it can), as `rules
    list` prints (a paused trigger is said once, by its pause's line)."""
    health = rule.get("health")
    if health is None:
        line = trust_line(rule)
        return pause_lines(rule) + ([line] if line else [])
    return (
        pause_lines(rule)
        + [f"not ready: {problem}" for problem in health["problems"]]
        + [
            f"not ready: trigger #{t['index']} {t['type']}: {t['error']}"
            for t in health["triggers"]
            if not t["ready"] and not t.get("paused")
        ]
    )


def health_lines(rule: JsonObject) -> list[str]:
    """The rule's health with every trigger's path or error, as `rules show` prints."""
    health = rule.get("health")
    if health is None:
        line = trust_line(rule)
        return [line] if line else []
    lines = pause_lines(rule)
    lines += ["ready: every trigger can fire" if health["ready"] else "not ready"]
    lines += [f"  problem: {problem}" for problem in health["problems"]]
    for trigger in health["triggers"]:
        if trigger.get("paused"):
            lines.append(
                f"  trigger #{trigger['index']} {trigger['type']}: not ready: {trigger['error']}"
                + (f" (once resumed: {trigger['path']})" if trigger["path"] else "")
            )
        elif trigger["ready"]:
            lines.append(f"  trigger #{trigger['index']} {trigger['type']}: {trigger['path']}")
        else:
            lines.append(
                f"  trigger #{trigger['index']} {trigger['type']}: not ready: {trigger['error']}"
            )
    return lines
