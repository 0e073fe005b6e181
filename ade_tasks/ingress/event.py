"""The normalized event: one record for whatever arrived (a GitHub delivery, a custom webhook, a
git, lane or file event), so trigger filters, the ingress log and a run's `{{trigger.*}}` see the
same field names whatever the source.

Fields a source does not have stay None (or empty). The record is what a run stores as its
trigger, so `to_payload` / `from_payload` round-trip it through JSON.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from ade_tasks.json_document import JsonObject

EventSource = Literal["github", "webhook", "git", "lane", "file", "poll"]
EVENT_SOURCES: frozenset[str] = frozenset(get_args(EventSource))
SUMMARY_MAX = 200

_REQUIRED_STR = ("source", "delivery_id", "event_key")
_OPTIONAL_STR = (
    "trigger_type",
    "repo",
    "branch",
    "base",
    "title",
    "body",
    "author",
    "author_association",
    "head_sha",
    "url",
    "event",
    "action",
    "label",
    "sender",
)
_OPTIONAL_BOOL = ("draft", "merged", "by_engine")
_STR_TUPLES = ("labels", "paths")


def clip_summary(text: str) -> str:
    """`text` on one line (whitespace runs collapsed), cut to SUMMARY_MAX characters with `…`."""
    line = " ".join(text.split())
    return line if len(line) <= SUMMARY_MAX else line[: SUMMARY_MAX - 1].rstrip() + "…"


@dataclass(frozen=True)
class NormalizedEvent:
    """One delivery or event, reduced to the fields trigger filters and runs use."""

    source: EventSource
    delivery_id: str
    event_key: str
    trigger_type: str | None = None
    repo: str | None = None
    branch: str | None = None
    base: str | None = None
    number: int | None = None
    title: str | None = None
    body: str | None = None
    author: str | None = None
    author_association: str | None = None
    labels: tuple[str, ...] = ()
    draft: bool | None = None
    merged: bool | None = None
    head_sha: str | None = None
    url: str | None = None
    paths: tuple[str, ...] = ()
    summary: str = ""
    #: GitHub: the delivery's event (X-GitHub-Event) and action, the label a `labeled` /
    #: `unlabeled` delivery added or removed, and who sent it (`sender.login`).
    event: str | None = None
    action: str | None = None
    label: str | None = None
    sender: str | None = None
    #: Whether the sender is the engine's own GitHub identity; set when the event is matched
    #: (`ade_tasks.ingress.github.own_identity`), None before and for other sources.
    by_engine: bool | None = None
    #: The delivery's own objects for an event no dedicated trigger type reads (check_suite,
    #: deployment_status, ...), bounded (`ade_tasks.ingress.github`); None otherwise.
    data: JsonObject | None = dataclasses.field(default=None, hash=False)

    def __post_init__(self) -> None:
        if self.source not in EVENT_SOURCES:
            known = ", ".join(sorted(EVENT_SOURCES))
            raise ValueError(f"unknown event source {self.source!r} (known: {known})")
        # The summary is a run's one-line trigger description and an ingress log column, so every
        # source gets the same bound here rather than each normalizer remembering it.
        object.__setattr__(self, "summary", clip_summary(self.summary))
        # Lists given by callers would make the frozen record unhashable and mutable underneath;
        # a lone string would otherwise become a tuple of its characters.
        for name in _STR_TUPLES:
            value = getattr(self, name)
            object.__setattr__(self, name, (value,) if isinstance(value, str) else tuple(value))

    def to_payload(self) -> JsonObject:
        """All fields as a JSON-ready dict (tuples become lists); a run's `trigger`."""
        data: JsonObject = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            data[field.name] = list(value) if isinstance(value, tuple) else value
        return data

    @classmethod
    def from_payload(cls, data: Mapping[str, object]) -> NormalizedEvent:
        """Rebuild an event from `to_payload` output; ValueError names a missing or bad field.

        Keys this version does not know are ignored, so a trigger stored by a newer version
        still loads.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"an event payload must be a JSON object, not {type(data).__name__}")
        fields: JsonObject = {}
        for name in _REQUIRED_STR:
            fields[name] = _typed(data, name, str, required=True)
        for name in _OPTIONAL_STR:
            fields[name] = _typed(data, name, str)
        for name in _OPTIONAL_BOOL:
            fields[name] = _typed(data, name, bool)
        fields["number"] = _typed(data, "number", int)
        fields["summary"] = _typed(data, "summary", str) or ""
        fields["data"] = _typed(data, "data", dict)
        for name in _STR_TUPLES:
            items = data.get(name) or []
            if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
                raise ValueError(f"event field {name!r} must be a list of strings, got {items!r}")
            fields[name] = tuple(items)
        return cls(**fields)


def _typed(data: Mapping[str, Any], name: str, kind: type, *, required: bool = False) -> Any:
    value = data.get(name)
    if value is None:
        if required:
            raise ValueError(f"event payload has no {name!r}; it must be a {kind.__name__}")
        return None
    # bool is an int subclass: a stored `true` must not pass as a PR number.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"event field {name!r} must be a {kind.__name__}, got {value!r}")
    return value
