"""Where webhook and event matching (`ade.ingress.dispatch`) is consumed: its own queue,
`ade.ingress`, so that matching an event (up to its 10 s bound) never holds a pool process a
run needs (with prefetch 1 and late acks a busy process holds its slot).

Upgrades: before this queue existed, matching went to `ade.control`, and a cluster's only
worker was often `-Q ade.builtin,ade.control`. So that such a worker keeps matching events after
an upgrade instead of leaving them waiting on a queue nobody reads, a worker that consumes
`ade.control` also consumes `ade.ingress` (`adopted_queue`), and says so in its log. The
deployment examples give both to a worker of their own (`-Q ade.ingress,ade.control`), and the
run workers consume run queues only; `ade-tasks doctor` warns while ingress shares a worker
with a run queue.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from celery import Celery
from celery.signals import celeryd_after_setup

log = logging.getLogger(__name__)

INGRESS_TASK = "ade.ingress.dispatch"
INGRESS_QUEUE = "ade.ingress"
CONTROL_QUEUE = "ade.control"


def adopted_queue(consumed: Collection[str]) -> str | None:
    """The queue a worker consuming `consumed` adds: `ade.ingress` when it consumes
    `ade.control` but not `ade.ingress`, else None."""
    if CONTROL_QUEUE in consumed and INGRESS_QUEUE not in consumed:
        return INGRESS_QUEUE
    return None


def install(app: Celery) -> None:
    """Make `app`'s workers adopt `ade.ingress` as `adopted_queue` says, once `-Q` is applied."""

    def after_setup(sender: object = None, instance: object = None, **_: object) -> None:
        if getattr(instance, "app", None) is app:
            _adopt(app, sender)

    # A weak reference (the default) dies with the app that holds the handler.
    app.ade_ingress_queue_handler = after_setup
    celeryd_after_setup.connect(after_setup)


def _adopt(app: Celery, worker: object) -> None:
    queues = app.amqp.queues
    added = adopted_queue(set(queues.consume_from or queues))
    if added is None:
        return
    queues.select_add(added)
    log.warning(
        "worker %s consumes %s, so it also matches webhooks and events (%s): runs may wait "
        "behind matching on this worker; give matching a worker of its own "
        "(`ade-tasks worker -Q %s,%s`) and leave %s off the run workers",
        worker, CONTROL_QUEUE, added, added, CONTROL_QUEUE, CONTROL_QUEUE,
    )  # fmt: skip
