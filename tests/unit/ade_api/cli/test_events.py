"""Local events without services: `emit`'s parsing and request, the watcher's batching and
filtering, and the `exclude` filter of file.changed triggers."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import httpx
import pytest
from click.testing import CliRunner
from pydantic import TypeAdapter

from ade_api.cli import events as cli_events
from ade_api.cli import main
from ade_api.cli.events import (
    ApiCallError,
    changed_paths,
    event_summary,
    file_change_excludes,
    is_ignored,
    parse_fields,
    split_paths,
    watch_loop,
)
from ade_tasks.ingress.event import NormalizedEvent
from ade_tasks.rules.triggers import FileTrigger, Trigger
from ade_tasks.triggers.filters import trigger_matches, why_not

TRIGGER: TypeAdapter[Any] = TypeAdapter(Trigger)
ROOT = Path("/work/project")


# --- emit: options and the request --------------------------------------------------------


def test_fields_parse_name_value_pairs_keeping_equals_signs_in_values() -> None:
    assert parse_fields(["ticket=ADE-1", "query=a=b", "empty="]) == {
        "ticket": "ADE-1",
        "query": "a=b",
        "empty": "",
    }


def test_a_later_field_of_the_same_name_wins() -> None:
    assert parse_fields(["env=dev", "env=prod"]) == {"env": "prod"}


@pytest.mark.parametrize("pair", ["novalue", "=value", " =x"])
def test_a_field_without_a_name_or_equals_sign_is_refused_with_the_expected_form(
    pair: str,
) -> None:
    with pytest.raises(click.BadParameter, match="name=value"):
        parse_fields([pair])


def test_paths_from_git_are_split_on_nul_and_paths_from_people_on_lines() -> None:
    assert split_paths("a b.py\0dir/c\nd.txt\0") == ["a b.py", "dir/c\nd.txt"]
    assert split_paths("src/a.py\nsrc/b.py\n\n") == ["src/a.py", "src/b.py"]


def test_summaries_say_what_happened_where() -> None:
    commit = event_summary(
        "git.commit", repo="api", branch="main", sha="0123456789abcdef", title="Fix", paths=[]
    )
    push = event_summary("git.push", repo="api", branch="main", sha=None, title=None, paths=[])
    files = event_summary(
        "file.changed", repo=None, branch=None, sha=None, title=None, paths=list("abcd")
    )
    assert commit == "Commit 0123456789 on main in api: Fix"
    assert push == "Push to main in api"
    assert files == "4 changed paths: a, b, c, …"


class Recorder:
    """An in-memory API: records requests and answers with the given status and body."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status, self.body = status, body
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(self.status, json=self.body)


@pytest.fixture
def api_answers(monkeypatch: pytest.MonkeyPatch) -> Callable[[int, dict[str, Any]], Recorder]:
    def install(status: int, body: dict[str, Any]) -> Recorder:
        recorder = Recorder(status, body)
        original = cli_events.Api.__init__

        def init(self: cli_events.Api, settings: Any, url: str | None) -> None:
            original(self, settings, url)
            self.client = httpx.Client(base_url=self.base, transport=httpx.MockTransport(recorder))

        monkeypatch.setattr(cli_events.Api, "__init__", init)
        return recorder

    return install


def test_emit_posts_the_event_and_prints_its_id(
    api_answers: Callable[[int, dict[str, Any]], Recorder],
) -> None:
    # Given an API that stores the event as number 7
    api = api_answers(202, {"event_id": 7, "duplicate": False, "delivery_id": "d-1"})
    # When emit runs with every option (an empty branch, as a hook on a detached HEAD sends)
    argv = ["emit", "git.commit", "--repo", "acme/api", "--branch", "", "--sha", "abc"]
    argv += ["--path", "b.py", "--path", "a.py", "--paths-from", "-", "--field", "k=v"]
    result = CliRunner().invoke(main, [*argv, "--delivery-id", "d-1"], input="c.py\0a.py")
    # Then the API got one well-formed event and the id is printed
    assert result.exit_code == 0, result.output
    assert result.output == "event 7 stored (delivery d-1)\n"
    (request,) = api.requests
    assert (request.method, request.url.path) == ("POST", "/api/v1/ingress/events")
    body = json.loads(request.content)
    assert body["type"] == "git.commit" and body["branch"] is None
    assert body["paths"] == ["a.py", "b.py", "c.py"]
    assert body["fields"] == {"k": "v"} and body["delivery_id"] == "d-1"
    assert body["summary"] == "Commit abc in acme/api"


def test_emit_says_duplicate_for_a_repeated_delivery(
    api_answers: Callable[[int, dict[str, Any]], Recorder],
) -> None:
    api_answers(202, {"event_id": None, "duplicate": True, "delivery_id": "d-1"})
    result = CliRunner().invoke(main, ["emit", "git.push", "--delivery-id", "d-1"])
    assert result.exit_code == 0
    assert result.output.startswith("duplicate: delivery d-1 was seen before")


def test_emit_shows_the_apis_reason_for_a_refused_event(
    api_answers: Callable[[int, dict[str, Any]], Recorder],
) -> None:
    detail = "event type 'lane.created' cannot be emitted locally; use one of git.commit"
    api_answers(422, {"title": "Invalid Input", "status": 422, "detail": detail})
    result = CliRunner().invoke(main, ["emit", "lane.created"])
    assert result.exit_code == 1
    assert f"answered 422: {detail}" in result.output


def test_a_bad_field_is_a_usage_error_before_anything_is_sent(
    api_answers: Callable[[int, dict[str, Any]], Recorder],
) -> None:
    api = api_answers(202, {})
    result = CliRunner().invoke(main, ["emit", "git.push", "--field", "oops"])
    assert result.exit_code == 2 and "name=value" in result.output
    assert api.requests == []


# --- the `exclude` filter of file.changed triggers ----------------------------------------


def file_event(*paths: str) -> NormalizedEvent:
    return NormalizedEvent(
        source="file", delivery_id="d", event_key="file.changed", trigger_type="file.changed",
        paths=paths,
    )  # fmt: skip


SRC_NOT_TMP = {"type": "file.changed", "paths": ["src/**"], "exclude": ["**/*.tmp"]}


def test_exclude_is_an_optional_list_of_a_file_trigger() -> None:
    assert TRIGGER.validate_python({"type": "file.changed", "paths": ["a"]}).exclude == []
    trigger = TRIGGER.validate_python(SRC_NOT_TMP)
    assert isinstance(trigger, FileTrigger) and trigger.exclude == ["**/*.tmp"]


def test_a_change_whose_every_path_is_excluded_does_not_match() -> None:
    trigger = TRIGGER.validate_python(SRC_NOT_TMP)
    assert why_not(trigger, file_event("src/a.tmp", "src/b/c.tmp")) == (
        "every changed path matches exclude **/*.tmp"
    )


def test_excluded_paths_do_not_count_for_paths() -> None:
    trigger = TRIGGER.validate_python(SRC_NOT_TMP)
    # src/a.tmp would match src/** but is excluded; docs/x.md is not excluded but not in src/
    assert not trigger_matches(trigger, file_event("src/a.tmp", "docs/x.md"))
    assert trigger_matches(trigger, file_event("src/a.tmp", "src/a.py"))


def test_a_trigger_without_exclude_matches_as_before() -> None:
    trigger = {"type": "file.changed", "paths": ["src/**"]}
    assert trigger_matches(trigger, file_event("src/a.tmp"))


# --- watch: batching and filtering --------------------------------------------------------


def batch(*paths: str) -> set[tuple[int, str]]:
    return {(1, f"{ROOT}/{path}") for path in paths}


def no_dirs(_path: Path) -> bool:
    return False


def test_a_batch_becomes_sorted_unique_relative_paths() -> None:
    changes = [*batch("src/b.py", "src/a.py"), (2, f"{ROOT}/src/a.py"), (1, "/elsewhere/x")]
    assert changed_paths(changes, ROOT, [], is_dir=no_dirs) == ["src/a.py", "src/b.py"]


def test_git_node_modules_and_ade_state_are_ignored_at_any_depth() -> None:
    changes = batch(".git/index", "web/node_modules/x/i.js", ".ade/ade.db", "src/a.py")
    assert changed_paths(changes, ROOT, [], is_dir=no_dirs) == ["src/a.py"]


def test_directories_are_left_out_because_rules_match_files() -> None:
    changes = batch("src", "src/a.py")
    assert changed_paths(changes, ROOT, [], is_dir=lambda p: p.name == "src") == ["src/a.py"]


def test_a_path_is_ignored_only_when_every_file_trigger_excludes_it() -> None:
    # One trigger excludes *.tmp, another wants everything: a .tmp file still matters
    assert not is_ignored("src/a.tmp", [["**/*.tmp"], []])
    assert is_ignored("src/a.tmp", [["**/*.tmp"], ["src/**"]])
    assert not is_ignored("src/a.tmp", [])  # no file trigger: nothing is excluded


def test_excludes_come_from_file_triggers_of_rules_that_can_run() -> None:
    def rule(enabled: bool, trust: str, *triggers: dict[str, Any]) -> dict[str, Any]:
        return {"enabled": enabled, "trust_state": trust, "document": {"triggers": triggers}}

    rules = [
        rule(True, "trusted", {"type": "file.changed", "exclude": ["a/**"]}, {"type": "manual"}),
        rule(True, "trusted", {"type": "file.change", "paths": ["**"]}),  # an alias, no exclude
        rule(False, "trusted", {"type": "file.changed", "exclude": ["off/**"]}),
        rule(True, "untrusted", {"type": "file.changed", "exclude": ["shared/**"]}),
    ]
    assert file_change_excludes(rules) == [["a/**"], []]


class FakeApi:
    """Stands in for the API of the watch loop: a list of excludes and of events sent."""

    def __init__(self, *excludes: list[str]) -> None:
        self.excludes = list(excludes)
        self.sent: list[list[str]] = []
        self.down = False
        self.said: list[str] = []

    def load_excludes(self) -> list[list[str]]:
        if self.down:
            raise ApiCallError("cannot reach the ADE API")
        return self.excludes

    def send(self, paths: list[str]) -> str:
        if self.down:
            raise ApiCallError("cannot reach the ADE API")
        self.sent.append(paths)
        return f"event {len(self.sent)}"

    def run(self, batches: list[set[tuple[int, str]]], pending: set[str]) -> None:
        watch_loop(batches, ROOT, self.load_excludes, self.send, self.said.append, pending)


def test_each_batch_becomes_one_event_and_ignored_or_empty_batches_none() -> None:
    api = FakeApi(["**/*.tmp"])
    pending: set[str] = set()
    api.run([batch("src/a.py", "src/b.py"), set(), batch("x.tmp", "node_modules/y")], pending)
    assert api.sent == [["src/a.py", "src/b.py"]]
    assert api.said == ["file.changed event 1: 2 changed paths: src/a.py, src/b.py"]
    assert pending == set()


def test_excludes_are_read_again_for_each_batch() -> None:
    api = FakeApi()
    batches = iter([batch("a.tmp"), batch("b.tmp")])

    def second_batch_after_a_rule_change() -> Iterator[set[tuple[int, str]]]:
        yield next(batches)
        api.excludes = [["*.tmp"]]
        yield next(batches)

    watch_loop(second_batch_after_a_rule_change(), ROOT, api.load_excludes, api.send,
               api.said.append, set())  # fmt: skip
    assert api.sent == [["a.tmp"]]


def test_a_batch_the_api_could_not_take_goes_with_the_next_one() -> None:
    api = FakeApi()
    pending: set[str] = set()
    api.down = True
    api.run([batch("a.py")], pending)
    assert pending == {"a.py"} and "not sent yet" in api.said[-1]
    api.down = False
    api.run([batch("b.py")], pending)
    assert api.sent == [["a.py", "b.py"]] and pending == set()
