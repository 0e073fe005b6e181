"""The API's ingress publisher: stored events reach the workers in shared messages, from a
thread that outlives a broker outage or a database fault."""

from __future__ import annotations

import logging

import pytest

from ade_api.http.ingress_publisher import MAX_BATCH, IngressPublisher
from ade_tasks.errors import BrokerUnavailableError
from tests.support import wait_until


class Recorder:
    """A `hand_over` that remembers each batch (one message each), or fails while `down`."""

    def __init__(self) -> None:
        self.messages: list[tuple[int, ...]] = []
        self.down = False

    def __call__(self, event_ids: list[int]) -> None:
        if self.down:
            raise BrokerUnavailableError("the broker is marked down")
        self.messages.append(tuple(event_ids))

    @property
    def sent(self) -> list[int]:
        return [event_id for message in self.messages for event_id in message]


def test_events_waiting_together_share_messages_and_each_is_sent_once() -> None:
    hand_over = Recorder()
    publisher = IngressPublisher(hand_over)
    events = list(range(1, 3 * MAX_BATCH + 8))
    for event_id in events:
        publisher.submit(event_id)
    publisher.close()

    assert sorted(hand_over.sent) == events
    assert len(hand_over.messages) < len(events) / 2
    assert max(len(message) for message in hand_over.messages) <= MAX_BATCH


def test_a_lone_event_is_sent_without_waiting_for_company() -> None:
    hand_over = Recorder()
    publisher = IngressPublisher(hand_over)
    publisher.submit(7)

    wait_until(lambda: hand_over.messages == [(7,)], 2, "the lone event to be sent")
    publisher.close()


def test_a_failed_hand_over_loses_the_message_not_the_thread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hand_over = Recorder()
    publisher = IngressPublisher(hand_over)
    hand_over.down = True
    with caplog.at_level(logging.ERROR, logger="ade_api.http.ingress_publisher"):
        publisher.submit(1)
        wait_until(lambda: "recovery sweep sends them" in caplog.text, 5, "the error")
    assert "handing ingress events [1] over failed" in caplog.text
    assert hand_over.sent == []

    hand_over.down = False
    publisher.submit(2)
    publisher.close()
    assert hand_over.sent == [2]
