"""The figures of `bench/beat.py`: one side's result and how it prints."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.common import percentile

TARGET_SECONDS = 10.0  # the one-shots, from their run_at
STARTUP_TARGET_SECONDS = 10.0  # issue 18: 3 beats loading 100,000 rules
POLL_SECONDS = 0.05


@dataclass
class Result:
    """One side: seconds from the boundary to the first, median, p95 and last item queued."""

    label: str
    count: int
    first: float
    p50: float
    p95: float
    last: float
    cpu_ms: float  # per item, processes named in `notes`
    complete: bool = True  # False: `last` is an extrapolation past the deadline
    p99: float = math.nan
    startup: float = math.nan  # seconds from starting the process(es) to a loaded schedule
    notes: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.count / self.last if self.last > 0 else math.inf


def secs(seconds: float) -> str:
    """Seconds as the report prints them ("-" when not measured)."""
    return "-" if math.isnan(seconds) else f"{seconds:.2f} s"


def boundary_target(count: int) -> float:
    """Issue 18's goal for a boundary of `count` rules: 5 s up to 10,000, 30 s above."""
    return 5.0 if count <= 10_000 else 30.0


def offsets_result(label: str, count: int, offsets: Sequence[float], cpu_ms: float) -> Result:
    """A side's figures from the seconds each item took from due to queued."""
    return Result(
        label,
        count,
        min(offsets),
        percentile(offsets, 50),
        percentile(offsets, 95),
        max(offsets),
        cpu_ms,
        p99=percentile(offsets, 99),
    )
