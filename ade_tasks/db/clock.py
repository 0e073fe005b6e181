"""The database's clock: reading it, following it, and saying when this machine's clock is off.

Several beats decide together which slots are due and stamp what they claim and fire; if each
judged by its own machine's clock, a beat 90 s fast would fire every slot 90 s early and write
timestamps 90 s in the future. So a beat follows the database's clock (`DatabaseClock`, checked
on its ticks): one `SELECT clock_timestamp()` every `CHECK_EVERY`, which costs a round trip, not
one per slot. The time read is anchored at the moment its answer arrived, so the clock followed
is behind the database's by at most that round trip (well under a millisecond on a LAN) and
never ahead of it, but for how far the two clocks' rates part in the 30 s between two reads
(microseconds for clocks NTP keeps in step): a slot is never due before its time by the
database's clock, and a timestamp written is never in the database's future. The offset reported
(this machine's clock minus the database's) is taken at the middle of the round trip, the best
estimate of it.

On SQLite the database is a file on this machine and its clock is this machine's: nothing is read
and the offset is 0.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from ade_tasks import clock
from ade_tasks.db.engine import SessionFactory, autocommit

log = logging.getLogger(__name__)

#: How often the database's clock is read again: a clock that drifts or is stepped, on either
#: side, is followed again within this.
CHECK_EVERY = timedelta(seconds=30)
#: An offset beyond this is said in the log (and seen in `ade_beat_clock_offset_seconds`).
SKEW_WARNING = 2.0
#: A skew already said is said again when it moved by more than this since.
SKEW_CHANGE = 1.0

_READ = text("SELECT clock_timestamp()")


@dataclass(frozen=True)
class ClockReading:
    """One read of the database's clock, with this machine's around it."""

    database: datetime  # the database's clock_timestamp()
    local: datetime  # this machine's clock at the middle of the round trip
    received: float  # time.monotonic() when the answer arrived

    @property
    def offset(self) -> float:
        """Seconds this machine's clock is ahead of the database's (negative: behind)."""
        return (self.local - self.database).total_seconds()


def read_clock(session_factory: SessionFactory) -> ClockReading | None:
    """Read the database's clock in one round trip; None on SQLite (this machine's clock)."""
    if session_factory.kw["bind"].dialect.name != "postgresql":
        return None
    # Autocommit (no BEGIN round trip) and the connection checked out before timing starts, so
    # the round trip timed is the SELECT's alone.
    with autocommit(session_factory)() as session:
        connection = session.connection()
        sent, local = time.monotonic(), datetime.now(UTC)
        database = connection.execute(_READ).scalar_one()
        received = time.monotonic()
    return ClockReading(database, local + timedelta(seconds=(received - sent) / 2), received)


class DatabaseClock:
    """Keeps this process's `utcnow()` on the database's clock (`check()` on every tick reads it
    when `every` has passed) and logs when this machine's clock is off by more than
    `SKEW_WARNING` seconds: once when it is seen, again only when it changes by more than
    `SKEW_CHANGE`, and once when it is back within."""

    def __init__(
        self,
        read: Callable[[], ClockReading | None],
        who: str,
        *,
        every: timedelta = CHECK_EVERY,
    ) -> None:
        self._read = read
        self._who = who
        self._every = every.total_seconds()
        self._checked: float | None = None  # time.monotonic() of the last read
        self._said: float | None = None  # the skew last logged; None: within SKEW_WARNING
        #: Seconds this machine's clock is ahead of the database's; None until read.
        self.offset: float | None = None

    def check(self) -> None:
        """Read the database's clock if `every` has passed since the last read, and follow it."""
        if self._checked is not None and time.monotonic() - self._checked < self._every:
            return
        reading = self._read()
        self._checked = time.monotonic()
        if reading is None:  # SQLite: the database's clock is this machine's
            clock.unfollow()
            self.offset = 0.0
            return
        clock.follow(reading.database, reading.received)
        self.offset = reading.offset
        self._say(reading.offset)

    def _say(self, offset: float) -> None:
        if abs(offset) > SKEW_WARNING:
            if self._said is None or abs(offset - self._said) > SKEW_CHANGE:
                log.warning(
                    "%s: this machine's clock is %.1f s %s the database's; schedules are judged "
                    "and timestamps written by the database's clock, but fix this machine's time "
                    "synchronisation (NTP)",
                    self._who,
                    abs(offset),
                    "ahead of" if offset > 0 else "behind",
                )
                self._said = offset
        elif self._said is not None:
            log.info(
                "%s: this machine's clock is back within %.0f s of the database's (%+.3f s)",
                self._who,
                SKEW_WARNING,
                offset,
            )
            self._said = None
