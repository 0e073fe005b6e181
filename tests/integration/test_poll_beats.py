"""GitHub polling inside real `ade-tasks beat` processes: PostgreSQL, Redis, a real worker and
the scripted GitHub on 127.0.0.1. Several beats poll one repository once per interval, a
SIGKILLed beat's polling moves to another within one interval, the cursor outlives every beat,
and labels and title edits fire rules."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select

from ade_tasks.db import cursors as cursors_db
from ade_tasks.db import heartbeats as heartbeats_db
from ade_tasks.db.schema import (
    IngressCursorRow,
    IngressEventRow,
    RunRow,
    ScheduleOccurrenceRow,
)
from ade_tasks.ingress.poll_claims import POLL_CLAIMS
from tests.conftest import write_rule
from tests.fake_http import ScriptedServer
from tests.integration.conftest import Cluster
from tests.support import BIN, Child, wait_until

REPO = "acme/widgets"
TOKEN = "ghp_beats_token"
INTERVAL = 2.0  # seconds; production defaults to 30
RULES = {"label": "github.issue_labeled", "pr": "github.pr_updated", "opened": "github.pr_opened"}


@pytest.fixture
def github() -> Iterator[ScriptedServer]:
    with ScriptedServer(repos=[REPO], token=TOKEN) as server:
        yield server


@pytest.fixture
def polling(cluster: Cluster, github: ScriptedServer) -> Cluster:
    """A cluster whose beats poll the scripted GitHub every INTERVAL seconds, with rules on
    labels, PR updates and openings, a worker to run them, and the cursor at the past hour."""
    cluster.env.update(
        ADE_GITHUB__API_URL=github.url,
        ADE_GITHUB__TOKEN=TOKEN,
        ADE_GITHUB__POLL_INTERVAL_SECONDS=str(INTERVAL),
        ADE_GITHUB__POLL="auto",  # the default: on, as no webhook secret is set
    )
    for rule_id, kind in RULES.items():
        write_rule(
            cluster.tmp / "rules",
            f"{rule_id}.yaml",
            f"id: {rule_id}\ntriggers: [{{type: {kind}, repo: {REPO}}}]\n"
            "execution: {kind: built-in, actions: [{type: run-command, command: 'true'}]}\n",
        )
    cluster.sync_rules(cluster.tmp / "rules")
    start = (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    with cluster.session_factory.begin() as session:
        cursors_db.write(
            session, f"github-poll:{REPO}", f"{REPO}={start}", by="test", now=datetime.now(UTC)
        )
    cluster.worker()
    return cluster


def stamp(seconds_ago: float = 0) -> str:
    return (datetime.now(UTC) - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def deliveries(cluster: Cluster) -> list[str]:
    with cluster.session_factory() as session:
        rows = session.scalars(
            select(IngressEventRow.delivery_id)
            .where(IngressEventRow.source == "poll")
            .order_by(IngressEventRow.id)
        )
        return [str(row) for row in rows]


def runs_by_rule(cluster: Cluster) -> dict[str, int]:
    with cluster.session_factory() as session:
        rows = session.execute(select(RunRow.rule_id, func.count()).group_by(RunRow.rule_id))
        return {str(rule_id): int(count) for rule_id, count in rows}


def poll_claims(cluster: Cluster, after: datetime | None = None) -> list[ScheduleOccurrenceRow]:
    with cluster.session_factory() as session:
        query = select(ScheduleOccurrenceRow).where(ScheduleOccurrenceRow.rule_id == POLL_CLAIMS)
        if after is not None:
            query = query.where(ScheduleOccurrenceRow.slot > after)
        return list(session.scalars(query.order_by(ScheduleOccurrenceRow.slot)))


def more_polls(cluster: Cluster, count: int) -> None:
    """Wait until `count` more slots have been claimed and polled (or time runs out)."""
    now = datetime.now(UTC)
    claims = wait_until(
        lambda: (found := poll_claims(cluster, after=now)) and len(found) >= count and found,
        count * INTERVAL + 10,
        f"{count} more polls",
    )

    def committed() -> bool:  # every poll rewrites the cursor, with or without changes
        with cluster.session_factory() as session:
            row = session.get(IngressCursorRow, f"github-poll:{REPO}")
            return row is not None and row.updated_at >= claims[-1].claimed_at

    wait_until(committed, 10, "the last of those polls to commit")


def pid_of(owner: str) -> int:
    # "poller:<host>:<pid>:<hex>" (the beat's id behind the poller's prefix)
    return int(owner.split(":")[-2])


def listings(github: ScriptedServer) -> list[str]:
    return [
        r.query["since"][0] for r in github.requests_to("GET") if r.path == f"/repos/{REPO}/issues"
    ]


def test_three_beats_poll_a_repository_once_per_interval_and_store_each_change_once(
    polling: Cluster, github: ScriptedServer
) -> None:
    # Given three real beats polling one repository
    first_up = datetime.now(UTC)
    beats = [polling.beat() for _ in range(3)]
    all_up = datetime.now(UTC)

    # When a PR is opened, an issue labeled and the PR renamed and labeled
    pr = github.seed_pull(REPO, "WIP widgets", created_at=stamp(5), pushed_at=stamp(600))
    bug = github.seed_issue(REPO, "Broken widget", created_at=stamp(7200))
    github.label(REPO, bug["number"], "triage", at=stamp(2), actor="dora")
    github.rename(REPO, pr["number"], "Add widgets", at=stamp(1), actor="erin")
    github.label(REPO, pr["number"], "ready", at=stamp(0), actor="erin")
    wait_until(lambda: len(deliveries(polling)) >= 4, 30, "the beats to store the changes")
    wait_until(
        lambda: runs_by_rule(polling) == {"opened": 1, "label": 1, "pr": 2},
        30,
        "each change to run its rule",
    )
    more_polls(polling, 3)  # room for a second storage, if there were one

    # Then each change was stored once and ran its rule once
    stored = deliveries(polling)
    assert len(stored) == len(set(stored)) == 4
    assert {d.split(":")[2] for d in stored} == {
        "pr-opened",
        "issue-labeled",
        "pr-edited",
        "pr-labeled",
    }
    assert runs_by_rule(polling) == {"opened": 1, "label": 1, "pr": 2}
    # And each slot was polled by one beat, which the other two offered and lost
    later = poll_claims(polling, after=all_up + timedelta(seconds=INTERVAL))
    assert later and all(claim.duplicate_claims == 2 for claim in later[:-1])
    elapsed = (datetime.now(UTC) - first_up).total_seconds()
    assert len(listings(github)) <= elapsed / INTERVAL + 2
    # And every beat says it is a poller, for rule health
    with polling.session_factory() as session:
        pollers = [h for h in heartbeats_db.recent(session) if h.kind == heartbeats_db.POLLER]
    assert sorted(pid_of(h.process_id) for h in pollers) == sorted(b.pid for b in beats)


def test_a_sigkilled_polling_beat_is_replaced_within_one_interval_and_nothing_repeats(
    polling: Cluster, github: ScriptedServer
) -> None:
    # Given two beats, and a change the first poll stores
    beats: dict[int, Child] = {}
    for _ in range(2):
        child = polling.beat()
        beats[child.pid] = child
    github.seed_pull(REPO, "Widgets", created_at=stamp(1))
    wait_until(lambda: len(deliveries(polling)) == 1, 30, "the PR to be stored")

    # When the beat that polled last is SIGKILLed
    holder = pid_of(poll_claims(polling)[-1].claimed_by)
    beats[holder].signal(signal.SIGKILL)
    killed_at = datetime.now(UTC)
    bug = github.seed_issue(REPO, "Broken", created_at=stamp(7200))
    github.label(REPO, bug["number"], "triage", at=stamp(0))

    # Then the other beat claims the next slot within one interval and stores the label once
    survivor = next(pid for pid in beats if pid != holder)
    taken = wait_until(
        lambda: next(
            (c for c in poll_claims(polling, after=killed_at) if pid_of(c.claimed_by) == survivor),
            None,
        ),
        10,
        "the surviving beat to poll",
    )
    assert (taken.claimed_at - killed_at).total_seconds() <= INTERVAL + 1.5  # a tick's slack
    wait_until(lambda: len(deliveries(polling)) == 2, 10, "the label to be stored")
    more_polls(polling, 2)
    stored = deliveries(polling)
    assert len(stored) == len(set(stored)) == 2
    assert all(pid_of(c.claimed_by) == survivor for c in poll_claims(polling, after=taken.slot))


def test_the_cursor_outlives_every_beat(polling: Cluster, github: ScriptedServer) -> None:
    # Given a beat that stored a change and advanced the cursor, then stopped
    first = polling.beat()
    github.seed_pull(REPO, "Widgets", created_at=stamp(1))
    wait_until(lambda: len(deliveries(polling)) == 1, 30, "the PR to be stored")
    first.stop()
    with polling.session_factory() as session:
        saved = cursors_db.read(session, f"github-poll:{REPO}")
    assert saved is not None
    before = len(listings(github))

    # When a new beat starts
    polling.beat()
    wait_until(lambda: len(listings(github)) > before, 20, "the new beat to poll")

    # Then it resumed at the saved cursor and stored nothing again
    assert listings(github)[before] == saved.split("=", 1)[1]
    more_polls(polling, 2)
    assert len(deliveries(polling)) == 1


def test_the_standalone_poller_and_a_beat_share_the_claims(
    polling: Cluster, github: ScriptedServer
) -> None:
    # Given a beat and a standalone `ade-tasks poll github` (its floor is 10 s, the beat's 2 s)
    polling.beat()
    argv = [str(BIN / "ade-tasks"), "poll", "github", "--interval", "10"]
    standalone = Child(argv, polling.env, polling.tmp / "poll.log", polling.tmp)
    polling.children.append(standalone)

    # When changes arrive while both run
    pr = github.seed_pull(REPO, "Widgets", created_at=stamp(1))
    wait_until(lambda: len(deliveries(polling)) == 1, 30, "the PR to be stored")
    github.label(REPO, pr["number"], "ready", at=stamp(0))
    wait_until(lambda: len(deliveries(polling)) == 2, 30, "the label to be stored")
    more_polls(polling, 2)

    # Then each change is stored once and ran its rule once; the standalone poller is alive
    assert len(set(deliveries(polling))) == len(deliveries(polling)) == 2
    assert runs_by_rule(polling) == {"opened": 1, "pr": 1}
    assert "Traceback" not in standalone.output()
    with polling.session_factory() as session:
        owners = {h.process_id for h in heartbeats_db.recent(session) if h.kind == "poller"}
    assert len(owners) == 2  # the beat's and the standalone's: both offer every slot
