"""Trigger filters: whether a rule's trigger (GitHub, git or file) starts on a normalized event;
`filter_matcher` is the `Matcher` of those three families, which share every filter. When it
does not, `refusal` names the first filter that refused it and what that filter saw (an
event's matching verdicts show it); `why_not` is that reason alone.

The trigger's canonical type must be one the event starts (its own trigger type; for a GitHub
delivery also `github.event` and the types its action stands for, `ade_tasks.ingress.github.
trigger_types`). A GitHub event sent by the engine's own identity (marked `by_engine` when it is
matched) starts only a trigger with `include_own: true`. Then every filter the trigger gives must
match (an empty list or None is "not given"):

- `event` (github.event): equality with the delivery's GitHub event (X-GitHub-Event).
- `actions`: the delivery's action is one of them; an event without an action never matches.
- `label` (*_labeled): the label just added is one of them, case-insensitively.

- `repo`: case-insensitive equality with `owner/name`.
- `branches` / `base_branches`: globs (`ade_tasks.globs`, so `release/*` does not match
  `release/a/b`) over the event's branch / base; an event without one never matches.
- `labels`: every label present on the event, case-insensitively.
- `authors`: the event author's login, case-insensitively; `author_associations`: membership.
- `draft`: equality; an event that does not say (None) never matches a draft filter.
- `title_regex` / `body_regex`: a search with RE2 (`ade_tasks.patterns`: linear time, so a
  hostile title cannot stall a worker); a missing title or body never matches. A title or body
  longer than `patterns.MAX_SUBJECT_CHARS` raises `SubjectTooLongError`, which fails the event
  with the reason rather than answering for a part of the text.
- `keywords`: any keyword in the title or body, case-insensitively (a substring: `@ade`).
- `paths`: any changed path matches a glob; an event without paths never matches.
- `exclude` (file.changed): changed paths matching one of these globs are dropped before `paths`
  is checked, so an event whose every path is excluded never matches.

A trigger field this module has no check for (a webhook's `hook`, a lane trigger's `lanes`)
fails the match when it is given: an unchecked filter must not quietly widen a rule.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping

from pydantic import BaseModel

from ade_tasks.globs import path_matches
from ade_tasks.ingress.event import NormalizedEvent
from ade_tasks.ingress.github import trigger_types
from ade_tasks.patterns import PatternError, SubjectTooLongError, compile_pattern
from ade_tasks.rules.triggers import Trigger, canonical_trigger_type
from ade_tasks.triggers.matcher import Refusal, TriggerTest

TriggerSpec = Trigger | Mapping[str, object]
"""A trigger model, or (a hand-written or stored trigger) its mapping of fields."""


def filter_matcher(_source: str, payload: Mapping[str, object], /) -> TriggerTest:
    """GitHub, git and file triggers: their filters over the event normalized from `payload`
    (the payload carries its own source)."""
    event = NormalizedEvent.from_payload(payload)
    return lambda _rule, trigger: refusal(trigger, event)


def repo_keys(_source: str, payload: Mapping[str, object], /) -> tuple[str, ...]:
    """The repository a GitHub event is of (none: only triggers without `repo` may start)."""
    repo = payload.get("repo")
    return (repo,) if isinstance(repo, str) else ()


def trigger_matches(trigger: TriggerSpec, event: NormalizedEvent) -> bool:
    """Whether `trigger` (a trigger model or its dict) starts on `event`."""
    return refusal(trigger, event) is None


def why_not(trigger: TriggerSpec, event: NormalizedEvent) -> str | None:
    """The first reason `trigger` does not start on `event`, in a few words; None if it does."""
    refused = refusal(trigger, event)
    return None if refused is None else refused.reason


def refusal(trigger: TriggerSpec, event: NormalizedEvent) -> Refusal | None:
    """The first filter of `trigger` that refuses `event`, with its reason; None if it starts."""
    spec = _fields(trigger)
    kind = spec.pop("type", None)
    if not isinstance(kind, str):
        return Refusal("type", "the trigger has no type")
    kind = canonical_trigger_type(kind)
    if kind not in trigger_types(event):
        got = event.trigger_type or f"{event.event_key} (no trigger type)"
        if event.trigger_type and event.action:
            got = f"{got} ({event.event_key})"
        return Refusal("type", f"wants {kind}, event is {got}")
    if event.by_engine and spec.pop("include_own", None) is not True:
        return Refusal(
            "include_own",
            f"sender {event.sender} is the engine's own GitHub identity (ADE_GITHUB__BOT_LOGINS); "
            "set include_own: true on the trigger to run on its events",
        )
    spec.pop("include_own", None)
    exclude = _strings(spec.pop("exclude", None) or [])
    if exclude and event.paths:
        kept = tuple(path for path in event.paths if not path_matches(path, exclude))
        if not kept:
            return Refusal("exclude", f"every changed path matches exclude {_shown(exclude)}")
        # The other filters (`paths`) must only see what the trigger did not exclude.
        event = dataclasses.replace(event, paths=kept)
    for name, wanted in spec.items():
        if wanted is None or (isinstance(wanted, list | tuple) and not wanted):
            continue
        check = _CHECKS.get(name)
        if check is None:
            return Refusal(
                name, f"filter {name!r} cannot be checked against a {event.source} event"
            )
        reason = check(wanted, event)
        if reason is not None:
            return Refusal(name, reason)
    return None


def _fields(trigger: TriggerSpec) -> dict[str, object]:
    if isinstance(trigger, BaseModel):
        return {name: getattr(trigger, name) for name in type(trigger).model_fields}
    if isinstance(trigger, Mapping):
        return dict(trigger)
    raise TypeError(f"a trigger must be a trigger model or a mapping, not {type(trigger).__name__}")


def _strings(value: object) -> list[str]:
    # A hand-written dict trigger may say `branches: main`; iterating it would yield letters.
    if isinstance(value, str):
        return [value]
    return [str(item) for item in value] if isinstance(value, Iterable) else [str(value)]


def _shown(values: list[str]) -> str:
    return ", ".join(values)


# --- one check per filter: None when it matches, else the reason -----------------------------


def _repo(wanted: object, event: NormalizedEvent) -> str | None:
    if event.repo is not None and event.repo.lower() == str(wanted).lower():
        return None
    return f"repo {event.repo or '(none)'} is not {wanted}"


def _globs_over(field: str) -> Callable[[object, NormalizedEvent], str | None]:
    def check(wanted: object, event: NormalizedEvent) -> str | None:
        value: str | None = getattr(event, field)
        globs = _strings(wanted)
        if value is None:
            return f"event has no {field} to match {_shown(globs)}"
        if path_matches(value, globs):
            return None
        return f"{field} {value} matches none of {_shown(globs)}"

    return check


def _labels(wanted: object, event: NormalizedEvent) -> str | None:
    present = {label.casefold() for label in event.labels}
    missing = [label for label in _strings(wanted) if label.casefold() not in present]
    return f"missing label(s) {_shown(missing)}" if missing else None


def _authors(wanted: object, event: NormalizedEvent) -> str | None:
    logins = _strings(wanted)
    if event.author is not None and event.author.casefold() in {a.casefold() for a in logins}:
        return None
    return f"author {event.author or '(none)'} is not one of {_shown(logins)}"


def _associations(wanted: object, event: NormalizedEvent) -> str | None:
    allowed = _strings(wanted)
    association = event.author_association
    if association is not None and association.upper() in {a.upper() for a in allowed}:
        return None
    return f"author association {association or '(none)'} is not one of {_shown(allowed)}"


def _draft(wanted: object, event: NormalizedEvent) -> str | None:
    if event.draft is None:
        return "event does not say whether it is a draft"
    return None if event.draft == wanted else f"draft is {event.draft}, wanted {wanted}"


def _regex_over(field: str) -> Callable[[object, NormalizedEvent], str | None]:
    def check(wanted: object, event: NormalizedEvent) -> str | None:
        text: str | None = getattr(event, field)
        if text is None:
            return f"event has no {field} for {field}_regex"
        try:
            found = compile_pattern(str(wanted)).search(text)
        except PatternError as exc:  # rule models validate it; a hand-written dict may not
            return f"{field}_regex is invalid: {exc.message}"
        except SubjectTooLongError as exc:
            raise SubjectTooLongError(
                f"{field}_regex {wanted!r} cannot search the event's {field}: {exc.message}"
            ) from None
        return None if found else f"{field} does not match {wanted!r}"

    return check


def _keywords(wanted: object, event: NormalizedEvent) -> str | None:
    text = f"{event.title or ''}\n{event.body or ''}".casefold()
    keywords = _strings(wanted)
    # A blank keyword would be a substring of everything; it says nothing, so it matches nothing.
    if any(keyword and keyword.casefold() in text for keyword in keywords):
        return None
    return f"none of the keywords {_shown(keywords)} in title or body"


def _event(wanted: object, event: NormalizedEvent) -> str | None:
    if event.event is not None and event.event == str(wanted):
        return None
    return f"event is {event.event or '(none)'}, not {wanted}"


def _actions(wanted: object, event: NormalizedEvent) -> str | None:
    actions = _strings(wanted)
    if event.action is None:
        return f"{event.event_key} has no action to match {_shown(actions)}"
    if event.action in actions:
        return None
    return f"action {event.action} is not one of {_shown(actions)}"


def _label(wanted: object, event: NormalizedEvent) -> str | None:
    labels = _strings(wanted)
    if event.label is None:
        return f"{event.event_key} added no label (wanted {_shown(labels)})"
    if event.label.casefold() in {label.casefold() for label in labels}:
        return None
    return f"label added is {event.label}, not one of {_shown(labels)}"


def _paths(wanted: object, event: NormalizedEvent) -> str | None:
    globs = _strings(wanted)
    if not event.paths:
        return f"event has no changed paths to match {_shown(globs)}"
    if any(path_matches(path, globs) for path in event.paths):
        return None
    return f"no changed path matches {_shown(globs)}"


_CHECKS: dict[str, Callable[[object, NormalizedEvent], str | None]] = {
    "repo": _repo,
    "branches": _globs_over("branch"),
    "base_branches": _globs_over("base"),
    "labels": _labels,
    "authors": _authors,
    "author_associations": _associations,
    "draft": _draft,
    "title_regex": _regex_over("title"),
    "body_regex": _regex_over("body"),
    "keywords": _keywords,
    "paths": _paths,
    "event": _event,
    "actions": _actions,
    "label": _label,
}
