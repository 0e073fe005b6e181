"""Durations as rules, settings and commands write them: `90`, `90s`, `15m`, `2h`, `1d`."""

from __future__ import annotations

import math
import re
from datetime import timedelta

from pydantic import TypeAdapter

MAX_DURATION = timedelta(days=366)  # the longest duration any field takes, before its own bound


def parse_duration(value: object) -> timedelta:
    """`90`, `"90s"`, `"15m"`, `"2h"`, `"1d"` -> timedelta (a bare number is seconds); at most
    `MAX_DURATION` (366 days) either way, so `1e300` is refused, not an overflow."""
    if isinstance(value, timedelta):
        seconds: float = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = value
    elif isinstance(value, str) and value.startswith("P"):  # ISO 8601, as stored in the database
        seconds = TypeAdapter(timedelta).validate_python(value).total_seconds()
    else:
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", str(value))
        if not match:
            raise ValueError(f"{value!r} is not a duration; write e.g. 90s, 15m, 2h or 1d")
        number, unit = float(match[1]), match[2] or "s"
        seconds = number * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
    if isinstance(seconds, float) and not math.isfinite(seconds):
        raise ValueError(f"{value!r} is not a finite duration")
    if abs(seconds) > MAX_DURATION.total_seconds():
        raise ValueError(f"{value!r} is longer than {MAX_DURATION.days} days, the longest duration")
    return timedelta(seconds=seconds)
