"""`${env:NAME}` references resolve on the worker; their values are masked wherever output goes."""

from __future__ import annotations

import json
import random
from urllib.parse import quote

import pytest

from ade_tasks.errors import AdeError
from ade_tasks.secrets import Masker, SecretError, StreamMasker, check, references, resolve

TOKEN = 'tok"en\\é-42'  # a quote, a backslash and non-ASCII: every escaped form differs


def test_references_are_found_in_nested_values_once_each_in_order() -> None:
    step = {
        "command": "curl -H 'X: ${env:API_TOKEN}' ${env:URL}",
        "env": {"A": "${env:URL}", "B": ["${env:_second1}", 3, None]},
    }
    assert references(step) == ["API_TOKEN", "URL", "_second1"]


def test_malformed_references_are_load_time_problems_with_their_path() -> None:
    step = {"command": ["echo ${env:}", "echo ${env:1X} ${env:OK}"], "url": "${env:OPEN"}
    problems = check(step, "rules/notify.yaml:steps[0]")
    assert len(problems) == 3
    assert problems[0].startswith("rules/notify.yaml:steps[0].command[0]: malformed")
    assert "'${env:1X}'" in problems[1] and "command[1]" in problems[1]
    assert "'${env:OPEN'" in problems[2]
    assert all("${env:NAME}" in problem for problem in problems)


def test_references_in_keys_are_a_problem_because_keys_are_not_resolved() -> None:
    problems = check({"env": {"${env:NAME}": "x"}}, "r.yaml:steps[0]")
    assert len(problems) == 1 and "values only, not in keys" in problems[0]


def test_well_formed_references_have_no_problems() -> None:
    assert check({"command": "echo ${env:A_1} $HOME ${PATH}"}, "r.yaml:steps[0]") == []


def test_resolve_returns_a_resolved_deep_copy_and_a_masker_for_the_values_used() -> None:
    step = {"command": "curl ${env:URL}", "args": ["--token=${env:TOKEN}", 5]}
    env = {"URL": "https://hooks.example/T0/B1", "TOKEN": TOKEN, "UNUSED": "not-a-secret"}
    resolved, masker = resolve(step, env, "step 'notify'")
    assert resolved == {
        "command": "curl https://hooks.example/T0/B1",
        "args": [f"--token={TOKEN}", 5],
    }
    assert step["args"] == ["--token=${env:TOKEN}", 5]  # the rule's own document is untouched
    assert (
        masker.mask(f"{resolved} not-a-secret")
        == "{'command': 'curl ***', 'args': ['--token=***', 5]} not-a-secret"
    )


def test_a_resolved_value_is_not_resolved_again() -> None:
    resolved, _ = resolve("${env:A}", {"A": "${env:B}", "B": "b-value"}, "step 'x'")
    assert resolved == "${env:B}"


def test_missing_secrets_are_all_named_with_where_and_what_to_do_but_never_a_value() -> None:
    step = {"command": "${env:SLACK_WEBHOOK_URL} ${env:PRESENT} ${env:OTHER}"}
    with pytest.raises(SecretError) as caught:
        resolve(step, {"PRESENT": "present-value"}, "step 'notify' of rule 'deploy'")
    message = caught.value.message
    assert isinstance(caught.value, AdeError)
    assert caught.value.names == ("SLACK_WEBHOOK_URL", "OTHER")
    assert message.startswith("step 'notify' of rule 'deploy' needs secrets ")
    assert "${env:SLACK_WEBHOOK_URL}, ${env:OTHER}" in message
    assert "set them on every worker" in message
    assert "present-value" not in message


def test_the_longest_secret_is_masked_first() -> None:
    masker = Masker(["abc", "abcdef"])
    assert masker.mask("x abcdef abc") == "x *** ***"


def test_overlapping_secrets_leave_no_fragment_and_adjacent_ones_are_masked_each() -> None:
    masker = Masker(["abcd", "cdef"])
    assert masker.mask("1abcdef2") == "1***2"
    assert masker.mask("abcdcdef") == "******"


def test_escaped_forms_are_masked_in_json_reprs_and_urls() -> None:
    masker = Masker([TOKEN])
    assert masker.mask(json.dumps({"token": TOKEN})) == '{"token": "***"}'
    assert masker.mask(json.dumps({"token": TOKEN}, ensure_ascii=False)) == '{"token": "***"}'
    assert masker.mask(f"ValueError({TOKEN!r})") == "ValueError('***')"
    quoted = Masker(["pa'ss\\word"])  # repr picks its quotes by the whole string's content
    assert quoted.mask(repr("pa'ss\\word")) == '"***"'
    assert quoted.mask(repr('say "pa\'ss\\word"')) == "'say \"***\"'"
    assert (
        masker.mask(f"https://x.example/?t={quote(TOKEN, safe='')}") == "https://x.example/?t=***"
    )


def test_blank_values_are_ignored_and_short_ones_are_still_masked() -> None:
    assert Masker(["", "  ", "\n"]).mask("a  b\n") == "a  b\n"
    assert not Masker(["", " "]) and not Masker.none()
    assert Masker(["42"]).mask("port 8042") == "port 80***"


def test_maskers_merge() -> None:
    merged = Masker(["first-secret"]).merge(Masker(["second-secret"])).with_values(["third"])
    assert merged.mask("first-secret second-secret third") == "*** *** ***"


def test_mask_value_masks_every_string_in_nested_results() -> None:
    masker = Masker(["s3cr3t-value"])
    result = {
        "output": "got s3cr3t-value",
        "items": [{"s3cr3t-value": ("s3cr3t-value", 1)}],
        "n": 2,
    }
    assert masker.mask_value(result) == {
        "output": "got ***",
        "items": [{"***": ("***", 1)}],
        "n": 2,
    }


def test_stream_masking_equals_whole_text_masking_for_any_chunking() -> None:
    secrets = ["abcab", "cabx", "bca", "aaa", 'q"\\u']
    masker = Masker(secrets)
    rng = random.Random(20240601)
    pieces = [*secrets, json.dumps(secrets[-1])[1:-1], "a", "b", "c", "x", "-"]
    for _ in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        expected = masker.mask(text)
        cuts = sorted(rng.sample(range(len(text) + 1), rng.randint(0, min(len(text) + 1, 12))))
        stream = StreamMasker(masker)
        emitted = [
            stream.feed(text[a:b]) for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)
        ]
        assert "".join(emitted) + stream.flush() == expected, (text, cuts)


def test_stream_masker_holds_back_only_what_may_begin_a_secret() -> None:
    masker = Masker(["secret"])
    stream = StreamMasker(masker)
    assert stream.feed("0123456789") == "0123456789"  # nothing here can become a secret
    assert stream.feed("--sec") == "--"  # "sec" may: it waits for what follows
    assert stream.feed("ond se") == "second "  # it did not; "se" still may
    assert stream.feed("cret!") + stream.flush() == "***!"
    assert stream.feed("x" * 10_000 + "s") == "x" * 10_000  # at most longest - 1 wait


def test_stream_masker_without_secrets_holds_nothing_back() -> None:
    stream = StreamMasker(Masker.none())
    assert stream.feed("abc") == "abc" and stream.flush() == ""
