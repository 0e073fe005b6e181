"""Load-time checks of a built-in chain's steps beyond the document's shape: each step id is
unique, templates and conditions name variables that exist (earlier steps only, trigger fields
the rule's triggers give: `ade_tasks.rules.references`), secret references are well formed,
ade-actions are on the allow-list with fitting arguments. The rule's other templates (an agent
execution's prompt and thread, `concurrency.key`, `outputs.pr_title`) have their trigger
references checked here too.

They read the raw document, not the validated model, so they run even when other fields of
the rule are wrong: a rule's template and condition problems are reported in the same pass as
its structural ones (`rules.loader.parse_rule` runs both), one problem per field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ade_tasks.rules.ade_actions import check_step
from ade_tasks.rules.conditions import check_condition
from ade_tasks.rules.document import ADE_ACTION_NAME
from ade_tasks.rules.references import trigger_fields
from ade_tasks.rules.steps import ACTION_MODELS, default_step_id, templated_fields
from ade_tasks.secrets import check as check_secrets
from ade_tasks.templating import TriggerFields, check_name, variables
from ade_tasks.templating import check as check_template


def step_problems(document: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every problem of the document's steps (and its other templates' trigger references) as
    (field path, reason), in document order."""
    fields = trigger_fields(document)
    execution = document.get("execution")
    problems = _rule_template_problems(document, fields)
    if not isinstance(execution, Mapping) or execution.get("kind") != "built-in":
        return problems + _agent_execution_problems(execution, fields)
    actions = execution.get("actions")
    if not isinstance(actions, list):
        return problems
    earlier: list[str] = []
    for index, action in enumerate(actions):
        if not isinstance(action, Mapping):
            continue  # the structural check says what a step must be
        where = f"execution.actions.{index}"
        step_id = action.get("id") or default_step_id(str(action.get("type")), index)
        if step_id in earlier:
            problems.append(
                (f"{where}.id", f"step id {step_id!r} is taken by an earlier step; give each "
                 "step its own id")
            )  # fmt: skip
        problems += _problems_of_step(action, where, earlier, fields)
        earlier.append(str(step_id))
    return problems


def _problems_of_step(
    action: Mapping[str, Any], where: str, earlier: list[str], fields: TriggerFields | None
) -> list[tuple[str, str]]:
    found: list[str] = []
    condition = action.get("condition")
    if isinstance(condition, str):
        found += check_condition(
            condition, earlier_steps=earlier, where=f"{where}.condition", trigger_fields=fields
        )
    model = ACTION_MODELS.get(str(action.get("type")))
    for name in ("prompt", "thread"):
        text = action.get(name)
        if action.get("type") == "agent-session" and isinstance(text, str):
            # Rendered by the session (which fences outsiders' text); names checked here.
            found += check_template(
                text, earlier_steps=earlier, where=f"{where}.{name}", trigger_fields=fields
            )
    for name in templated_fields() if model is None else model.templated:
        if name not in action:
            continue
        value = action[name]
        found += check_secrets(value, f"{where}.{name}")
        found += [
            problem
            for text in _strings(value)
            for problem in check_template(
                text, earlier_steps=earlier, where=f"{where}.{name}", trigger_fields=fields
            )
        ]
    problems = [_split(problem, where) for problem in found]
    return problems + _ade_action_problems(action, where)


def _agent_execution_problems(
    execution: Any, fields: TriggerFields | None
) -> list[tuple[str, str]]:
    """An agent-session execution's prompt and thread: a chain of one step, so no step
    references; every name checked as a step's are."""
    if not isinstance(execution, Mapping) or execution.get("kind") != "agent-session":
        return []
    found: list[str] = []
    for name in ("prompt", "thread"):
        text = execution.get(name)
        if isinstance(text, str):
            where = f"execution.{name}"
            found += check_template(text, earlier_steps=[], where=where, trigger_fields=fields)
    return [_split(problem, "execution") for problem in found]


def _rule_template_problems(
    document: Mapping[str, Any], fields: TriggerFields | None
) -> list[tuple[str, str]]:
    """Trigger references of `concurrency.key` and `outputs.pr_title` (their models check the
    rest of their names)."""
    if fields is None:
        return []
    problems = []
    for section, name in (("concurrency", "key"), ("outputs", "pr_title")):
        part = document.get(section)
        text = part.get(name) if isinstance(part, Mapping) else None
        if not isinstance(text, str):
            continue
        where = f"{section}.{name}"
        for variable in variables(text):
            if variable.startswith("trigger."):
                problems += [
                    _split(problem, where) for problem in check_name(variable, [], where, fields)
                ]
    return problems


def _ade_action_problems(action: Mapping[str, Any], where: str) -> list[tuple[str, str]]:
    name, args = action.get("action"), action.get("args", {})
    if action.get("type") != "ade-action" or not isinstance(name, str):
        return []
    if not re.fullmatch(ADE_ACTION_NAME, name) or not isinstance(args, Mapping):
        return []  # the structural check reports the malformed name or arguments

    # Rules have no author role yet; a rule document loaded from the cluster's rules directory
    # is written by its administrators, so it counts as admin here, and the executor re-checks
    # admin-only actions against the rule's source in the database.
    problems = []
    for problem in check_step(name, args, admin=True):
        if problem.startswith("args"):
            problems.append(_split(problem, where))
        else:
            problems.append((f"{where}.action", problem))
    return problems


def _split(problem: str, where: str) -> tuple[str, str]:
    """`where.field: reason` (as the template, condition and secret checks write their
    problems, or `args.x: reason` relative to the step) as (field path, reason)."""
    field, _, reason = problem.partition(": ")
    return (field if field.startswith(where) else f"{where}.{field}"), reason


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []
