"""GitHub polling inside a beat: one thread per beat offering every repository's poll slots.

Every beat with polling on (`ADE_GITHUB__POLL`, see `GithubSettings.polls_in_beats`) runs a
`GithubPoller` in a daemon thread of its own, so a slow GitHub or a long Retry-After never
delays the tick that fires schedules. The slots are claimed across the cluster
(`ade_tasks.ingress.poll_claims`): however many beats run, each repository is polled once per
`ADE_GITHUB__POLL_INTERVAL_SECONDS`, and when the beat that polled it dies the next slot goes
to another beat. Each polling beat writes a poller heartbeat, so rule health sees a poller.

Worker main processes do not poll, although they take part in housekeeping: a cluster without
a beat is a webhook-only one (API and workers), which has no use for polling, while workers
come in numbers sized for runs and would multiply the claim traffic; `ade-tasks poll github`
serves a cluster that has neither beats nor webhooks.
"""

from __future__ import annotations

import logging
import threading

from ade_tasks.db.engine import SessionFactory
from ade_tasks.ingress.poll_cursors import CURSOR_FILE
from ade_tasks.ingress.poller import GithubPoller
from ade_tasks.retry import RetryPolicy
from ade_tasks.runs.senders import IngressSender
from ade_tasks.settings import Settings
from ade_workers.integrations.github import GithubClient

log = logging.getLogger(__name__)


class BeatPoller:
    """The polling thread of one beat (`start` once; it stops with the process)."""

    def __init__(
        self,
        session_factory: SessionFactory,
        sender: IngressSender,
        settings: Settings,
        beat_id: str,
    ) -> None:
        # No client-side retries: the poller's backoff honours Retry-After and rate-limit
        # resets in full (and holds them for every beat), where a retry policy would cut them.
        self._client = GithubClient.from_settings(settings.github, policy=RetryPolicy(attempts=0))
        self.poller = GithubPoller(
            session_factory,
            sender,
            self._client,
            owner=f"poller:{beat_id}",
            repos=settings.github.poll_repos,
            legacy_file=settings.data_dir / CURSOR_FILE,
            interval=settings.github.poll_interval_seconds,
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ade-github-poll", daemon=True)

    def start(self) -> None:
        """Start polling in the background."""
        self._thread.start()
        log.info(
            "beat polls GitHub as %s every %.0fs (claimed per repository)",
            self.poller.owner,
            self.poller.interval,
        )

    def stop(self) -> None:
        """Stop after the current tick."""
        self._stop.set()

    def _loop(self) -> None:
        self.poller.sleep = self._stop.wait
        try:
            self.poller.run(should_stop=self._stop.is_set)
        finally:
            self._client.close()


def start_if_enabled(
    session_factory: SessionFactory, sender: IngressSender, settings: Settings, beat_id: str
) -> BeatPoller | None:
    """Start a beat's polling thread when the settings ask for polling in beats."""
    if not settings.github.polls_in_beats:
        log.info("beat does not poll GitHub (ADE_GITHUB__POLL=%s)", settings.github.poll)
        return None
    poller = BeatPoller(session_factory, sender, settings, beat_id)
    poller.start()
    return poller
