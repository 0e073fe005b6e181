"""The cluster drains a relay: real beats and a worker on PostgreSQL and Redis, against a real
`ade-tasks relay serve` and, for the faults, a scripted relay (tests/fake_relay.py).

Each drained delivery goes through the webhook intake with its delivery id, so it runs its rule
once, also when it reached the cluster directly too. A poison event is recorded and passed, a
non-advancing cursor stops the drain (log, heartbeat, rule health, metric) without a hot loop, a
500 is retried in the next slot and then ever later (backoff), a 503 (or 429) no sooner than
its Retry-After, and of two beats one drains at a time."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select

from ade_tasks.db import cursors as cursors_db
from ade_tasks.db.schema import IngressEventRow, RunRow
from ade_tasks.relay.client import HttpRelayClient, RelayRefusedError, RelayUnavailableError
from ade_tasks.relay.drain import cursor_source
from tests import fake_relay
from tests.fake_relay import FakeRelay
from tests.fixtures import GITHUB_FIXTURES
from tests.integration.conftest import Cluster
from tests.integration.test_webhooks import HELLO, SECRET, rules_for, sign
from tests.relay_support import TOKEN, RelayProcess, start_relay
from tests.support import Child, free_port, wait_until

PR = (GITHUB_FIXTURES / "pull_request/opened.payload.json").read_bytes()
ISSUE = (GITHUB_FIXTURES / "issues/opened.payload.json").read_bytes()
SLOT = 2.0
RULES = {
    "on-pr": f"{{type: github.pr_opened, repo: {HELLO}}}",
    "on-issue": f"{{type: github.issue_opened, repo: {HELLO}}}",
}


def runs(cluster: Cluster) -> list[tuple[str, str]]:
    with cluster.session_factory() as session:
        rows = session.execute(select(RunRow.rule_id, RunRow.trigger).order_by(RunRow.queued_at))
        return [(rule_id, trigger.get("delivery_id")) for rule_id, trigger in rows]


def events(cluster: Cluster) -> list[IngressEventRow]:
    with cluster.session_factory() as session:
        return list(session.scalars(select(IngressEventRow).order_by(IngressEventRow.id)))


def cursor(cluster: Cluster, url: str) -> str | None:
    with cluster.session_factory() as session:
        return cursors_db.read(session, cursor_source(url))


def drain_ok(api: Any) -> list[str]:
    """The values of `ade_relay_drain_ok`, one per live drain."""
    lines = api.get("/metrics").text.splitlines()
    return [line.rsplit(" ", 1)[1] for line in lines if line.startswith("ade_relay_drain_ok{")]


def draining_beat(cluster: Cluster, url: str, token: str, slot: float = SLOT) -> Child:
    """A real `ade-tasks beat` draining the relay at `url`."""
    cluster.env.update(
        {
            "ADE_RELAY__URL": url,
            "ADE_RELAY__TOKEN": token,
            "ADE_RELAY__DRAIN_SLOT_SECONDS": str(slot),
        }
    )
    return cluster.beat()


@pytest.fixture
def fake() -> Iterator[FakeRelay]:
    relay = FakeRelay().start()
    yield relay
    relay.stop()


@pytest.fixture
def relay(cluster: Cluster) -> Iterator[RelayProcess]:
    process = start_relay(cluster.tmp)
    yield process
    process.client.close()
    process.child.stop()


def test_a_delivery_to_the_relay_runs_its_rule_once_and_health_says_relay(
    cluster: Cluster, relay: RelayProcess
) -> None:
    # given a cluster without a GitHub secret, whose beat drains a real relay
    rules_for(cluster, RULES)
    cluster.worker()
    draining_beat(cluster, relay.url, TOKEN)
    api = cluster.api()

    # when GitHub delivers to the relay
    assert relay.deliver("pull_request", PR, delivery="via-relay-1").status_code == 202

    # then the matching rule runs once, under the delivery's own id
    wait_until(lambda: runs(cluster), 30, "the relayed delivery's run")
    wait_until(lambda: cursor(cluster, relay.url) == "1", 10, "the drain's cursor")
    assert runs(cluster) == [("on-pr", "via-relay-1")]
    (event,) = events(cluster)
    assert (event.source, event.delivery_id) == ("github", "via-relay-1")
    # and rule health counts the relay as the path that fires github.* triggers
    health = api.get("/api/v1/rules/on-pr").json()["health"]
    assert health["ready"] is True, health
    assert health["triggers"][0]["path"].startswith(f"relay {relay.url}"), health
    assert drain_ok(api) == ["1.0"]
    time.sleep(SLOT * 2)  # two more slots drain the same relay: still one run
    assert runs(cluster) == [("on-pr", "via-relay-1")]


def test_a_delivery_sent_directly_and_through_the_relay_runs_once(
    cluster: Cluster, relay: RelayProcess
) -> None:
    rules_for(cluster, RULES)
    cluster.worker()
    api = cluster.api(env={"ADE_GITHUB__WEBHOOK_SECRET": SECRET})
    headers = {
        "X-GitHub-Event": "pull_request",
        "X-GitHub-Delivery": "both-ways",
        "X-Hub-Signature-256": sign(PR),
    }

    # when the same delivery reaches the cluster directly and the relay, then the drain runs
    direct = api.post("/api/v1/webhooks/github", content=PR, headers=headers)
    relayed = relay.deliver("pull_request", PR, delivery="both-ways")
    draining_beat(cluster, relay.url, TOKEN)

    assert direct.status_code == 202 and relayed.status_code == 202
    wait_until(lambda: cursor(cluster, relay.url) == "1", 30, "the drain to pass the event")
    wait_until(lambda: runs(cluster), 30, "the run")
    assert runs(cluster) == [("on-pr", "both-ways")]
    assert [(e.source, e.delivery_id) for e in events(cluster)] == [("github", "both-ways")]


def test_a_wakeup_drains_a_delivery_before_the_next_slot(
    cluster: Cluster, relay: RelayProcess
) -> None:
    # given a beat whose drain slot is long, listening on the relay's wake-up socket
    slot = 40.0
    rules_for(cluster, RULES)
    cluster.worker()
    draining_beat(cluster, relay.url, TOKEN, slot=slot)

    def listening_with_time_left() -> bool:
        return relay.listeners() == 1 and slot - time.time() % slot > 15

    wait_until(listening_with_time_left, slot + 30, "the drain to listen early in a slot")
    next_slot_in = slot - time.time() % slot

    # when a delivery arrives mid-slot
    relay.deliver("issues", ISSUE, delivery="woken")

    # then it runs before the next slot's safety poll could have found it
    wait_until(lambda: runs(cluster), next_slot_in - 2, "the woken drain's run")
    assert runs(cluster) == [("on-issue", "woken")]


def test_a_poison_event_is_recorded_and_passed_and_the_events_after_it_run(
    cluster: Cluster, fake: FakeRelay
) -> None:
    # given a relay holding a good delivery, a malformed one and another good one
    rules_for(cluster, RULES)
    fake.add("github", "good-1", "pull_request", PR)
    fake.add("github", "poison", "pull_request", b'{"action": "opened", not json')
    fake.add("github", "good-2", "issues", ISSUE)
    cluster.worker()

    # when a beat drains it
    beat = draining_beat(cluster, fake.url, fake_relay.TOKEN)

    # then both good deliveries run, the poison one is recorded with the reason, the cursor
    # passes all three
    wait_until(lambda: len(runs(cluster)) == 2, 30, "both good deliveries to run")
    assert sorted(runs(cluster)) == [("on-issue", "good-2"), ("on-pr", "good-1")]
    wait_until(lambda: cursor(cluster, fake.url) == "3", 10, "the cursor past the page")
    (poison,) = [e for e in events(cluster) if e.delivery_id == "poison"]
    assert poison.status == "failed"
    assert poison.error and "relayed event 2 refused" in poison.error, poison.error
    assert "not valid JSON" in poison.error
    assert "relayed event 2 refused" in beat.output()


def test_a_non_advancing_cursor_stops_the_drain_without_a_hot_loop(
    cluster: Cluster, fake: FakeRelay
) -> None:
    # given a relay that ignores `after` and answers its first event every time
    fake.ignore_after = True
    rules_for(cluster, RULES)
    fake.add("github", "only", "pull_request", PR)
    cluster.worker()
    beat = draining_beat(cluster, fake.url, fake_relay.TOKEN)
    api = cluster.api()

    # then the event runs once, and the next drain stops with the error in the log
    wait_until(lambda: runs(cluster), 30, "the first drain's run")
    wait_until(lambda: "relay drain stopped" in beat.output(), 20, "the drain to stop")
    assert "not after 1" in beat.output()
    # and it asks at most about once a slot (a hot loop would ask thousands of times)
    asked_before, window = len(fake.asked), SLOT * 3
    time.sleep(window)
    assert len(fake.asked) - asked_before <= window / SLOT + 2, fake.asked
    assert runs(cluster) == [("on-pr", "only")]
    assert cursor(cluster, fake.url) == "1"
    # and rule health and the metric say the relay drain is failing
    trigger = api.get("/api/v1/rules/on-pr").json()["health"]["triggers"][0]
    assert trigger["ready"] is False
    assert "is failing" in trigger["error"] and "replay" in trigger["error"], trigger
    assert set(drain_ok(api)) == {"0.0"}


def test_a_relay_answering_500_is_retried_in_the_next_slot(
    cluster: Cluster, fake: FakeRelay
) -> None:
    # given a relay whose first two listings fail with 500
    fake.fail_next = 2
    rules_for(cluster, RULES)
    fake.add("github", "after-500", "pull_request", PR)
    cluster.worker()
    beat = draining_beat(cluster, fake.url, fake_relay.TOKEN)

    # then the event runs once the relay answers, each retry a slot after the failure
    wait_until(lambda: runs(cluster), 30, "the run after the relay recovered")
    assert runs(cluster) == [("on-pr", "after-500")]
    assert "answered 500" in beat.output()
    first, second, third = fake.asked[:3]
    assert second.at - first.at >= SLOT / 2 and third.at - second.at >= SLOT / 2, fake.asked


def test_a_failing_relay_is_left_alone_longer_after_each_failure(
    cluster: Cluster, fake: FakeRelay
) -> None:
    # given a relay whose first two listings fail with 500
    fake.fail_next = 2
    rules_for(cluster, RULES)
    fake.add("github", "after-backoff", "pull_request", PR)
    cluster.worker()
    beat = draining_beat(cluster, fake.url, fake_relay.TOKEN)

    # then the event runs once the relay answers, and the drain waited a slot after the first
    # failure and two after the second (the beat ticks every second, hence the margins)
    wait_until(lambda: runs(cluster), 30, "the run after the relay recovered")
    first, second, third = (asked.at for asked in fake.asked[:3])
    assert SLOT - 1 <= second - first <= SLOT + 1, fake.asked
    assert 2 * SLOT - 1 <= third - second <= 2 * SLOT + 1, fake.asked
    assert "2 failure(s) in a row; next try in" in beat.output()
    assert runs(cluster) == [("on-pr", "after-backoff")]


def test_a_relay_answering_503_with_retry_after_is_left_alone_that_long(
    cluster: Cluster, fake: FakeRelay
) -> None:
    # given a relay that answers its first listing 503 with Retry-After: 5 (2.5 slots)
    fake.fail_next, fake.fail_status, fake.retry_after = 1, 503, "5"
    rules_for(cluster, RULES)
    fake.add("github", "after-503", "pull_request", PR)
    cluster.worker()
    beat = draining_beat(cluster, fake.url, fake_relay.TOKEN)

    # then the drain asks again no sooner than five seconds later (the first slot after them)
    wait_until(lambda: runs(cluster), 30, "the run after the relay's Retry-After")
    first, second = (asked.at for asked in fake.asked[:2])
    assert 5.0 <= second - first <= 5.0 + SLOT + 1, fake.asked
    assert "answered 503" in beat.output() and "asking for 5s (Retry-After)" in beat.output()
    assert runs(cluster) == [("on-pr", "after-503")]


def test_of_two_beats_one_drains_at_a_time_and_the_other_takes_over(
    cluster: Cluster, fake: FakeRelay
) -> None:
    # given two beats draining the same relay
    rules_for(cluster, RULES)
    cluster.worker()
    beats = [draining_beat(cluster, fake.url, fake_relay.TOKEN), cluster.beat()]

    # when deliveries keep arriving over several slots, and after two of them the beat that
    # drains is killed
    for number in range(4):
        if number == 2:
            drainer = fake.asked[-1].agent
            (killed,) = [b for b in beats if f":{b.pid}:" in drainer]
            killed.signal(signal.SIGKILL)
            killed.proc.wait(10)
        body = PR + b"\n" * (number + 1)  # another body: the intake dedups by body hash too
        fake.add("github", f"d-{number}", "pull_request", body)
        wait_until(lambda n=number: len(runs(cluster)) == n + 1, 30, f"delivery {number}'s run")
        slot_now = int(time.time() // SLOT)
        wait_until(lambda s=slot_now: int(time.time() // SLOT) > s, SLOT + 1, "the next slot")

    # then each delivery ran once, at most one wake-up socket was ever open, within each slot
    # only one beat asked the relay, and the survivor drained after the kill
    assert sorted(runs(cluster)) == [("on-pr", f"d-{n}") for n in range(4)]
    assert fake.most_sockets == 1, fake.socket_agents
    by_slot: dict[int, set[str]] = {}
    for asked in fake.asked:
        by_slot.setdefault(int(asked.at // SLOT), set()).add(asked.agent)
    assert all(len(agents) == 1 for agents in by_slot.values()), by_slot
    assert len({asked.agent for asked in fake.asked}) == 2
    assert fake.asked[-1].agent != drainer


def test_relayed_custom_hook_deliveries_run_their_rule_and_an_unconfigured_hook_is_poison(
    cluster: Cluster, fake: FakeRelay
) -> None:
    # given a cluster configuring hook `deploys` (not `builds`), and a relay holding a delivery
    # to each, one whose body is not JSON, and one the rule's filters leave out
    rules_for(cluster, {"deploy-done": '{type: webhook, hook: deploys, filters: {type: "done"}}'})
    cluster.env["ADE_HOOKS__DEPLOYS"] = json.dumps({"scheme": "token", "tokens": ["t0ken"]})
    fake.add("webhook:deploys", "dep-1", None, b'{"type": "done"}')
    fake.add("webhook:builds", "bld-1", None, b'{"type": "done"}')
    fake.add("webhook:deploys", "dep-2", None, b"not json")
    fake.add("webhook:deploys", "dep-3", None, b'{"type": "started"}')
    cluster.worker()

    # when a beat drains the relay
    draining_beat(cluster, fake.url, fake_relay.TOKEN)

    # then the configured hook's matching delivery runs, the other two are recorded
    wait_until(lambda: cursor(cluster, fake.url) == "4", 30, "the drain to pass all four")
    wait_until(lambda: runs(cluster), 30, "the hook's run")
    with cluster.session_factory() as session:
        rule_runs = session.execute(select(RunRow.rule_id, RunRow.trigger)).all()
    assert [(rule_id, trigger["delivery_id"]) for rule_id, trigger in rule_runs] == [
        ("deploy-done", "dep-1")
    ]
    failed = {e.delivery_id: e.error for e in events(cluster) if e.status == "failed"}
    assert set(failed) == {"bld-1", "dep-2"}
    assert "custom hook 'builds' is not configured on this cluster" in str(failed["bld-1"])
    assert "not valid JSON" in str(failed["dep-2"])
    log = cluster.api().get("/api/v1/webhooks/deploys/deliveries").json()
    outcomes = sorted(entry["outcome"].split(" (via")[0].split(":")[0] for entry in log)
    assert outcomes == ["accepted", "accepted", "refused"]  # dep-3: stored, matching no rule


def test_the_drains_client_tells_a_refused_token_a_failing_and_an_absent_relay_apart(
    fake: FakeRelay,
) -> None:
    wrong = HttpRelayClient(fake.url, "not-the-token")
    with pytest.raises(RelayRefusedError, match="set ADE_RELAY__TOKEN on the beats"):
        wrong.events(0)
    fake.fail_next = 1
    with pytest.raises(RelayUnavailableError, match="answered 500") as failing:
        HttpRelayClient(fake.url, fake_relay.TOKEN).events(0)
    assert failing.value.retry_after is None
    fake.fail_next, fake.fail_status, fake.retry_after = 1, 429, "7"
    with pytest.raises(RelayUnavailableError, match="answered 429") as limited:
        HttpRelayClient(fake.url, fake_relay.TOKEN).events(0)
    assert limited.value.retry_after == 7
    with pytest.raises(RelayUnavailableError, match="could not be reached"):
        HttpRelayClient(f"http://127.0.0.1:{free_port()}", "t", timeout=2).events(0)
