"""A rule's source on the web page: the stored document (keys sorted by the database) written
back as the YAML a person would write, and what changed between two versions."""

from __future__ import annotations

import json

import yaml

from ade_api.http.web.rule_source import changes, source_text
from ade_tasks.rules.loader import canonical_json, content_hash
from ade_tasks.rules.rule import Rule

WRITTEN = {
    "id": "deploy",
    "name": "Deploy",
    "triggers": [{"type": "schedule", "cron": "0 3 * * *", "timezone": "UTC"}, {"type": "manual"}],
    "inputs": {"target": {"type": "choice", "options": ["a", "b"], "required": True},
               "dry": {"type": "boolean", "default": True}},
    "execution": {"kind": "built-in", "actions": [{"id": "go", "type": "run-command",
                                                   "command": "make deploy"}]},
    "guardrails": {"max_duration_min": 10},
}  # fmt: skip


def _stored(document: dict[str, object]) -> tuple[str, dict[str, object]]:
    stored = Rule.model_validate(document).document()
    return content_hash(stored), json.loads(canonical_json(stored))


def test_the_source_reads_like_the_rule_file_in_the_order_it_was_written() -> None:
    text = source_text(*_stored(WRITTEN))
    lines = [line for line in text.splitlines() if not line.startswith(" ")]
    assert [line.split(":")[0] for line in lines if line[0] != "-"] == [
        "id", "name", "triggers", "inputs", "execution", "guardrails", "billing_code",
    ]  # fmt: skip
    assert "- type: schedule" in text and "  cron: 0 3 * * *" in text
    assert "position" not in text  # the order it keeps is shown, not the field
    assert "overlap" not in text  # fields left at their defaults are left out
    parsed = yaml.safe_load(text)
    assert list(parsed["inputs"]) == ["target", "dry"]
    assert Rule.model_validate(parsed).document() == Rule.model_validate(WRITTEN).document()


def test_a_document_this_release_cannot_read_is_shown_whole() -> None:
    old = {"id": "gone", "triggers": [{"type": "retired-kind"}], "execution": {"kind": "x"}}
    assert yaml.safe_load(source_text("old-hash", old)) == old


def test_what_changed_between_two_versions_is_a_unified_diff() -> None:
    before = source_text(*_stored(WRITTEN))
    after = source_text(*_stored({**WRITTEN, "guardrails": {"max_duration_min": 20}}))
    diff = changes(before, after, "version 1", "version 2")
    assert "--- version 1" in diff and "+++ version 2" in diff
    assert "-  max_duration_min: 10" in diff and "+  max_duration_min: 20" in diff
    assert changes(before, before, "a", "b") == ""
