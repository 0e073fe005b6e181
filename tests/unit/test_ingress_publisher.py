"""The API's ingress publisher: stored events reach the workers in shared messages, from a
thread that outlives a broker outage and applies the table's retention as it goes."""

from __future__ import annotations

import logging
import threading

import pytest

from ade_api.http.ingress_publisher import MAX_BATCH, IngressPublisher
from ade_tasks.db.ingress import PRUNE_EVERY
from ade_tasks.testing import InMemorySender
from tests.support import wait_until


class RecordingSender(InMemorySender):
    """Remembers each message (the ids it carried)."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[tuple[int, ...]] = []

    def send_ingress(self, *event_ids: int) -> None:
        super().send_ingress(*event_ids)
        self.messages.append(event_ids)


def test_events_waiting_together_share_messages_and_each_is_sent_once() -> None:
    sender = RecordingSender()
    publisher = IngressPublisher(sender, prune=lambda: None)
    events = list(range(1, 3 * MAX_BATCH + 8))
    for event_id in events:
        publisher.submit(event_id)
    publisher.close()

    assert sorted(sender.ingress) == events
    assert len(sender.messages) < len(events) / 2
    assert max(len(message) for message in sender.messages) <= MAX_BATCH


def test_a_lone_event_is_sent_without_waiting_for_company() -> None:
    sender = RecordingSender()
    publisher = IngressPublisher(sender, prune=lambda: None)
    publisher.submit(7)

    wait_until(lambda: sender.messages == [(7,)], 2, "the lone event to be sent")
    publisher.close()


def test_a_broker_outage_loses_the_message_not_the_thread(caplog: pytest.LogCaptureFixture) -> None:
    sender = RecordingSender()
    publisher = IngressPublisher(sender, prune=lambda: None)
    sender.down = True
    with caplog.at_level(logging.WARNING, logger="ade_api.http.ingress_publisher"):
        publisher.submit(1)
        wait_until(lambda: "recovery sweep sends them" in caplog.text, 5, "the warning")
    assert "ingress events [1] are stored but their message was not sent" in caplog.text
    assert sender.ingress == []

    sender.down = False
    publisher.submit(2)
    publisher.close()
    assert sender.ingress == [2]


def test_every_hundredth_event_applies_the_retention_bounds_off_the_request() -> None:
    pruned = threading.Event()
    sender = RecordingSender()
    publisher = IngressPublisher(sender, prune=pruned.set)
    publisher.submit(PRUNE_EVERY - 1)
    publisher.close()
    assert not pruned.is_set()

    publisher.submit(PRUNE_EVERY)  # a closed publisher starts again
    publisher.close()
    assert pruned.is_set()
    assert sender.ingress == [PRUNE_EVERY - 1, PRUNE_EVERY]


def test_a_failing_prune_is_logged_and_publishing_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> None:
        raise RuntimeError("the database went away")

    sender = RecordingSender()
    publisher = IngressPublisher(sender, prune=broken)
    with caplog.at_level(logging.ERROR, logger="ade_api.http.ingress_publisher"):
        publisher.submit(PRUNE_EVERY)
        wait_until(lambda: "retention bounds" in caplog.text, 5, "the prune error")
    publisher.submit(PRUNE_EVERY + 1)
    publisher.close()
    assert sender.ingress == [PRUNE_EVERY, PRUNE_EVERY + 1]
