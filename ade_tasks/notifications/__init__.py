"""Cluster notifications (docs/notifications.md): a failed or timed-out run, an approval or a
question waiting, a rule whose health changed, missed schedule occurrences and one-shot runs.

The system of record already holds every such event (a run's status and `finished_at`, a pending
approval, a `missed` occurrence or scheduled run), so nothing on a run's path notifies: the
housekeeping job `notifications` (one process per slot, `ade_workers.notifier`) finds the events of
the last `events.LOOKBACK` (`events`), decides their routes (`routing`), queues them in the outbox
table once per (event, route), and hands the due ones to delivery (`delivery`), which retries with
backoff and logs every failure. A route that is down or slow delays only its own notifications.
"""
