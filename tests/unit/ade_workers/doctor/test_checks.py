"""The doctor's parts without services: every check is bounded in time, a failed prerequisite
skips what depends on it, bad settings are named by their variables, and the verdicts on GitHub
scopes, providers and the sandbox."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from ade_api.cli import main
from ade_tasks.db.engine import SessionFactory
from ade_tasks.settings import Settings
from ade_workers.doctor.check import (
    Check,
    Finding,
    Probe,
    Verdict,
    run_check,
    run_checks,
    settings_problems,
)
from ade_workers.doctor.checks import (
    CHECKS,
    check_providers,
    check_sandbox,
    check_workers,
    load_probe,
)
from ade_workers.doctor.github_token import judge_scopes, parse_scopes
from tests.unit.conftest import add_rule


def test_a_check_that_hangs_fails_at_its_deadline_and_the_doctor_goes_on() -> None:
    # Given a check that never returns (a broker that accepts and never answers)
    release = threading.Event()
    hung = Check("broker", "answers", lambda _probe: release.wait(60) and Finding(Verdict.OK, ""))

    # When it runs with a 0.3 s bound
    started = time.monotonic()
    result = run_check(hung, Probe(Settings(), timeout=0.3))
    release.set()

    # Then it fails at the bound, saying so
    assert time.monotonic() - started < 2
    assert result.verdict == Verdict.FAIL
    assert "no answer within 0.3 s" in result.detail and "--timeout" in result.fix


def test_a_check_that_raises_fails_with_its_message() -> None:
    def broken(_probe: Probe) -> Finding:
        raise RuntimeError("connection reset")

    result = run_check(Check("x", "x", broken), Probe(Settings(), timeout=5))

    assert (result.verdict, result.detail) == (Verdict.FAIL, "RuntimeError: connection reset")


def test_checks_whose_prerequisite_failed_are_skipped_naming_it() -> None:
    started: list[str] = []
    checks = [
        Check("database", "", lambda _p: Finding(Verdict.FAIL, "down", "start it")),
        Check("schema", "", lambda _p: Finding(Verdict.OK, "head"), ("database",)),
        Check("github", "", lambda _p: Finding(Verdict.WARN, "no token")),
        Check("after", "", lambda _p: Finding(Verdict.OK, ""), ("github",)),
    ]

    results = list(
        run_checks(checks, Probe(Settings(), timeout=5), lambda c: started.append(c.name))
    )

    assert [(r.name, r.verdict) for r in results] == [
        ("database", Verdict.FAIL),
        ("schema", Verdict.SKIP),
        ("github", Verdict.WARN),
        ("after", Verdict.OK),  # a warning is not a failure
    ]
    assert results[1].detail == "not checked: database did not pass"
    assert started == ["database", "schema", "github", "after"]


def test_bad_settings_are_named_by_their_environment_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ADE_LEASE_SECONDS", "soon")
    monkeypatch.setenv("ADE_GITHUB__TOKEN", "CHANGE_ME")

    probe = load_probe(5)

    assert probe.settings is None and isinstance(probe.settings_error, ValidationError)
    problems = settings_problems(probe.settings_error)
    assert problems[0].startswith("ADE_GITHUB__TOKEN: ADE_GITHUB__TOKEN still holds")
    assert problems[1].startswith("ADE_LEASE_SECONDS: Input should be a valid number")


@pytest.mark.parametrize(
    ("header", "verdict", "said"),
    [
        ("repo, workflow, read:org", Verdict.OK, "scopes: read:org, repo, workflow"),
        ("repo", Verdict.OK, "without `workflow`: a push that changes .github/workflows/"),
        ("public_repo, read:org", Verdict.FAIL, "lacks the scope repo (`public_repo` reaches"),
        ("", Verdict.FAIL, "lacks the scope repo; its scopes: none"),
        (None, Verdict.OK, "fine-grained or GitHub App token"),
    ],
)
def test_the_token_scopes_verdict(header: str | None, verdict: Verdict, said: str) -> None:
    finding = judge_scopes("octocat", parse_scopes(header))

    assert finding.verdict == verdict
    assert said in finding.detail
    assert bool(finding.fix) == (verdict == Verdict.FAIL)


def test_no_bwrap_on_path_fails_the_sandbox_check_with_what_the_host_needs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))

    finding = check_sandbox(Probe(Settings(), timeout=5))

    assert finding.verdict == Verdict.FAIL
    assert finding.detail == "bubblewrap (`bwrap`) is not on PATH"
    assert "apt-get install bubblewrap" in finding.fix


def test_the_sandbox_opt_out_is_a_warning() -> None:
    finding = check_sandbox(Probe(Settings(sandbox="off"), timeout=5))

    assert finding.verdict == Verdict.WARN and "ADE_SANDBOX=off" in finding.detail


def test_a_configured_provider_that_is_not_ready_here_fails(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Given claude-code configured with a key, but its CLI is not installed here
    monkeypatch.setenv("ADE_PROVIDERS__CLAUDE_CODE__API_KEY", "sk-test")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-vendor")  # never what a run reads

    finding = check_providers(Probe(Settings(), timeout=5))

    assert finding.verdict == Verdict.FAIL
    assert finding.detail == "not ready here: claude-code (ready: none)"
    assert "claude-code: " in finding.fix


def test_no_configured_provider_is_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-vendor")

    finding = check_providers(Probe(Settings(), timeout=5))

    assert finding.verdict == Verdict.WARN


class _Inspect:
    """What `app.control.inspect().active_queues()` answers: worker -> its queues."""

    def __init__(self, queues: dict[str, list[str]]) -> None:
        self.queues = queues

    def active_queues(self) -> dict[str, list[dict[str, str]]]:
        return {w: [{"name": q} for q in names] for w, names in self.queues.items()}


class _App:
    def __init__(self, queues: dict[str, list[str]]) -> None:
        self.control = self
        self.queues = queues

    def inspect(self, timeout: float) -> _Inspect:
        return _Inspect(self.queues)


def test_a_queue_an_enabled_rule_uses_without_a_worker_fails_an_unused_one_warns(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    # Given an enabled rule on queue `nightly` and a disabled one on `other`
    for rule_id, queue, enabled in (("n", "nightly", "true"), ("o", "other", "false")):
        add_rule(session_factory, rules_dir, rule_id, f"""
            id: {rule_id}
            enabled: {enabled}
            queue: {queue}
            triggers: [{{type: manual}}]
            execution: {{kind: built-in, actions: [{{type: run-command, command: "true"}}]}}
            """)  # fmt: skip
    engine = session_factory.kw["bind"]
    settings = Settings(broker_url="redis://127.0.0.1:1/0")

    def workers(queues: dict[str, list[str]]) -> Finding:
        probe = Probe(settings, timeout=5, shared={"engine": engine, "celery": _App(queues)})
        return check_workers(probe)

    # When only ade.ingress, ade.control and ade.builtin have workers: the rule's queue is missing
    ingress = {"w0@h": ["ade.ingress", "ade.control"]}
    missing = workers({**ingress, "w1@h": ["ade.builtin"]})
    # When `nightly` has one too: only ade.agent, which no enabled rule uses, lacks one
    idle = workers({**ingress, "w1@h": ["ade.builtin"], "w2@h": ["nightly"]})

    # Then the first fails naming the queue and the command; the second only warns
    assert missing.verdict == Verdict.FAIL
    assert missing.detail.startswith("no worker consumes nightly: runs sent there wait")
    assert missing.fix.startswith("start a worker for it: `ade-tasks worker -Q nightly`")
    assert idle.verdict == Verdict.WARN
    assert idle.detail.startswith("no worker consumes ade.agent, which no enabled rule uses")
    assert "nightly: 1 worker(s)" in idle.detail and "other" not in idle.detail


def test_matching_beside_a_run_queue_warns_and_no_ingress_worker_fails(
    session_factory: SessionFactory,
) -> None:
    engine = session_factory.kw["bind"]
    settings = Settings(broker_url="redis://127.0.0.1:1/0")

    def workers(queues: dict[str, list[str]]) -> Finding:
        probe = Probe(settings, timeout=5, shared={"engine": engine, "celery": _App(queues)})
        return check_workers(probe)

    # When a worker matches events in the pool that runs rules (an upgraded `-Q
    # ade.builtin,ade.control` one, which adopts ade.ingress), or no worker consumes ade.ingress
    runs = {"w1@h": ["ade.builtin", "ade.agent"]}
    shared = workers({"w1@h": ["ade.builtin", "ade.agent", "ade.control", "ade.ingress"]})
    apart = workers({**runs, "w0@h": ["ade.ingress", "ade.control"]})
    none = workers({**runs, "w0@h": ["ade.control"]})

    # Then the first warns how to split them, the second passes, the third fails
    assert shared.verdict == Verdict.WARN
    assert shared.detail.startswith("w1@h match(es) webhooks and events (ade.ingress)")
    assert shared.fix.startswith("give matching a worker of its own")
    assert apart.verdict == Verdict.OK, apart
    assert none.verdict == Verdict.FAIL
    assert none.detail.startswith("no worker consumes ade.ingress")


def test_the_operations_page_explains_every_check() -> None:
    docs = (Path(__file__).resolve().parents[4] / "docs" / "operations.md").read_text()
    table = docs.split("### Checking a cluster: `ade-tasks doctor`", 1)[1]

    assert [c.name for c in CHECKS if f"| `{c.name}` |" not in table] == []


def test_bad_settings_are_the_doctors_first_failed_line_and_other_commands_one_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a setting that does not parse
    monkeypatch.setenv("ADE_LEASE_SECONDS", "soon")

    # When the doctor runs, and when another command runs
    doctor = CliRunner().invoke(main, ["doctor"])
    other = CliRunner().invoke(main, ["providers"])

    # Then the doctor names the variable on its settings line and skips what needs settings
    assert doctor.exit_code == 1, doctor.output
    first = doctor.output.splitlines()[0]
    assert first.startswith("settings   fail  ADE_LEASE_SECONDS: Input should be a valid number")
    assert "database   skip  not checked: settings did not pass" in doctor.output
    # And the other command stops with one error line instead of a traceback
    assert other.exit_code == 2
    assert other.output.startswith("error: the settings do not load: ADE_LEASE_SECONDS: ")
