"""The geometry of the web page's charts: pure functions from data to coordinates.

The templates (`templates/_charts.html`) turn these into inline SVG on the server, so a chart
needs no script, no build step and no CDN, and reads the same with JavaScript off. Colours come
from CSS classes (`bar-<status>`), never from inline styles: the pages' Content-Security-Policy
allows stylesheets from `/ui/static` only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta

from ade_tasks.db.history import DayDurations, DayOutcomes, RecentRun

#: The order of a stacked bar, bottom up: how a run ended, then what is still going on.
OUTCOME_ORDER = (
    "succeeded",
    "failed",
    "timed_out",
    "cancelled",
    "skipped",
    "waiting",
    "running",
    "queued",
)


def duration_text(seconds: float | None) -> str:
    """A duration as a person reads it: `850 ms`, `4.2 s`, `3 m 05 s`, `2 h 10 m`."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60} m {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} m"


#: Seconds a running timeline's axis leaves its bars to grow before live.js redraws the page.
RUNNING_ROOM_SECONDS = 10.0


@dataclass(frozen=True)
class Tick:
    """A labelled position on an axis (pixels from the SVG's origin)."""

    at: float
    label: str


@dataclass(frozen=True)
class Frame:
    """A chart's canvas, plot area and labelled axes."""

    width: int
    height: int
    left: int
    top: int
    right: int
    bottom: int
    x_label: str
    y_label: str
    x_ticks: list[Tick] = field(default_factory=list)
    y_ticks: list[Tick] = field(default_factory=list)

    @property
    def plot_width(self) -> int:
        return self.width - self.left - self.right

    @property
    def plot_height(self) -> int:
        return self.height - self.top - self.bottom

    @property
    def baseline(self) -> int:
        """The y of the x axis."""
        return self.height - self.bottom


def nice_step(span: float, ticks: int = 5) -> float:
    """A tick step of 1, 2 or 5 times a power of ten giving about `ticks` ticks over `span`."""
    raw = max(span, 1e-9) / ticks
    power = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if raw <= factor * power:
            return float(factor * power)
    return float(10 * power)  # pragma: no cover - the loop always returns


def _nice_top(value: float, ticks: int = 4) -> tuple[float, float]:
    """An axis top at or above `value` and its tick step."""
    step = nice_step(value, ticks)
    return max(step, math.ceil(value / step) * step), step


# --- sparkline ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dot:
    """A point with its tooltip; `current` marks the run the row is about."""

    x: float
    y: float
    title: str
    current: bool = False
    run_id: str = ""


@dataclass(frozen=True)
class Sparkline:
    """A rule's recent durations as a small line, newest on the right."""

    width: int
    height: int
    points: str
    dots: list[Dot]
    title: str


def sparkline(
    runs: Sequence[RecentRun], current: str | None = None, width: int = 96, height: int = 22
) -> Sparkline | None:
    """The sparkline of `runs` (oldest first); None for fewer than two runs."""
    if len(runs) < 2:
        return None
    pad = 3
    top = max(r.seconds for r in runs) or 1.0
    step = (width - 2 * pad) / (len(runs) - 1)
    dots = []
    for i, run in enumerate(runs):
        x = round(pad + i * step, 1)
        y = round(height - pad - (run.seconds / top) * (height - 2 * pad), 1)
        is_current = run.run_id == current
        dots.append(Dot(x, y, duration_text(run.seconds), is_current, run.run_id))
    low, high = min(r.seconds for r in runs), max(r.seconds for r in runs)
    title = f"last {len(runs)} runs: {duration_text(low)} to {duration_text(high)}"
    return Sparkline(width, height, " ".join(f"{d.x},{d.y}" for d in dots), dots, title)


# --- step timeline ------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepSpan:
    """A step as the timeline needs it (`finished` None: still running)."""

    index: int
    label: str
    status: str
    started: datetime
    finished: datetime | None


@dataclass(frozen=True)
class Bar:
    """One step's row: its bar (none for a step that has not started) and label."""

    index: int
    label: str
    status: str
    y: float
    x: float = 0.0
    width: float = 0.0
    start: float = 0.0  # seconds after the run's first step started
    title: str = ""
    started: bool = True
    running: bool = False


@dataclass(frozen=True)
class Timeline:
    """A Gantt chart of a run's steps over seconds since its first step started."""

    frame: Frame
    bars: list[Bar]
    bar_height: int
    scale: float  # pixels per second: what live.js grows a running bar by
    now: float  # seconds after the first start at which it was drawn
    domain: float  # seconds the x axis spans


ROW = 26
BAR = 16


def timeline(
    steps: Sequence[StepSpan], planned: Sequence[tuple[str, str]], now: datetime
) -> Timeline | None:
    """The timeline of `steps` and of the `planned` (label, status) steps that have not started;
    None when nothing has started. A running step's bar reaches `now`, and the axis leaves it
    room to grow (live.js extends it every second and reloads the page once it runs out)."""
    if not steps:
        return None
    origin = min(s.started for s in steps)
    ends = [(s.finished or now) for s in steps]
    elapsed = max((end - origin).total_seconds() for end in ends)
    running = any(s.finished is None for s in steps)
    # A running step's axis leaves it a quarter more and at least RUNNING_ROOM_SECONDS, so an
    # open page reloads for the timeline at most that often (a young run's would every second).
    room = max(elapsed * 1.25, elapsed + RUNNING_ROOM_SECONDS) if running else elapsed
    domain, step = _nice_top(max(room, 1.0), 5)
    rows = len(steps) + len(planned)
    frame = Frame(
        width=860,
        height=36 + rows * ROW + 40,
        left=180,
        top=16,
        right=24,
        bottom=40,
        x_label="seconds since the first step started",
        y_label="step",
    )
    scale = frame.plot_width / domain
    bars = []
    for row, span in enumerate(steps):
        start = (span.started - origin).total_seconds()
        end = ((span.finished or now) - origin).total_seconds()
        took = max(0.0, end - start)
        bars.append(
            Bar(
                index=span.index,
                label=span.label,
                status=span.status,
                y=frame.top + row * ROW + (ROW - BAR) / 2,
                x=round(frame.left + start * scale, 1),
                width=round(max(took * scale, 2.0), 1),  # a 10 ms step still shows
                start=round(start, 3),
                title=f"{span.label}: {span.status}, {duration_text(took)}",
                running=span.finished is None,
            )
        )
    for offset, (label, status) in enumerate(planned):
        row = len(steps) + offset
        y = frame.top + row * ROW + (ROW - BAR) / 2
        bars.append(Bar(index=row, label=label, status=status, y=y, started=False))
    ticks = [
        Tick(round(frame.left + value * scale, 1), duration_text(value) if value else "0")
        for value in _steps(domain, step)
    ]
    frame = replace(frame, x_ticks=ticks)
    now_offset = (now - origin).total_seconds()
    return Timeline(frame, bars, BAR, round(scale, 4), round(now_offset, 3), domain)


def _steps(top: float, step: float) -> list[float]:
    count = round(top / step)
    return [round(i * step, 6) for i in range(count + 1)]


# --- the rule page's charts: runs per day, p50/p95 per day ------------------------------------


@dataclass(frozen=True)
class Segment:
    """One status's part of a day's stacked bar."""

    x: float
    y: float
    width: float
    height: float
    status: str
    title: str


@dataclass(frozen=True)
class OutcomesChart:
    """Runs per day, stacked by outcome."""

    frame: Frame
    segments: list[Segment]
    statuses: list[str]  # the legend: the statuses that occur, in stacking order
    total: int


@dataclass(frozen=True)
class Series:
    """One line of a line chart (`name` is its legend and CSS class)."""

    name: str
    points: str
    dots: list[Dot]


@dataclass(frozen=True)
class DurationsChart:
    """p50 and p95 duration per day."""

    frame: Frame
    series: list[Series]
    runs: int


def _days(first: date, last: date) -> list[date]:
    return [first + timedelta(days=i) for i in range((last - first).days + 1)]


def _day_frame(first: date, last: date, y_label: str) -> tuple[Frame, float, list[date]]:
    days = _days(first, last)
    frame = Frame(
        width=860, height=240, left=64, top=16, right=24, bottom=44,
        x_label="day (UTC)", y_label=y_label,
    )  # fmt: skip
    slot = frame.plot_width / len(days)
    # Label about every week, always the newest day, so the axis says where "today" is.
    every = max(1, len(days) // 5)
    labelled = [i for i in range(len(days)) if (len(days) - 1 - i) % every == 0]
    ticks = [
        Tick(round(frame.left + (i + 0.5) * slot, 1), days[i].strftime("%m-%d")) for i in labelled
    ]
    return replace(frame, x_ticks=ticks), slot, days


def _y_ticks(frame: Frame, top: float, step: float, label: str = "") -> list[Tick]:
    def text(value: float) -> str:
        return duration_text(value) if label == "duration" and value else f"{value:g}"

    return [
        Tick(round(frame.baseline - value / top * frame.plot_height, 1), text(value))
        for value in _steps(top, step)
    ]


def outcomes_chart(days: Sequence[DayOutcomes], first: date, last: date) -> OutcomesChart:
    """Runs per day from `first` to `last` (UTC days), stacked by status."""
    frame, slot, all_days = _day_frame(first, last, "runs")
    by_day = {d.day: d.counts for d in days}
    highest = max((sum(c.values()) for c in by_day.values()), default=0)
    top, step = _nice_top(max(highest, 1), 4)
    if top != int(top) or step < 1:  # whole runs only
        top, step = max(1.0, math.ceil(top)), 1.0
    frame = replace(frame, y_ticks=_y_ticks(frame, top, step))
    known = [s for s in OUTCOME_ORDER if any(s in c for c in by_day.values())]
    others = sorted({s for c in by_day.values() for s in c} - set(OUTCOME_ORDER))
    statuses = known + others
    segments = []
    for i, day in enumerate(all_days):
        counts = by_day.get(day, {})
        y = float(frame.baseline)
        for status in statuses:
            count = counts.get(status, 0)
            if not count:
                continue
            height = count / top * frame.plot_height
            y -= height
            segments.append(
                Segment(
                    x=round(frame.left + i * slot + slot * 0.15, 1),
                    y=round(y, 1),
                    width=round(slot * 0.7, 1),
                    height=round(height, 1),
                    status=status,
                    title=f"{day.isoformat()}: {count} {status}",
                )
            )
    total = sum(sum(c.values()) for c in by_day.values())
    return OutcomesChart(frame, segments, statuses, total)


def durations_chart(days: Sequence[DayDurations], first: date, last: date) -> DurationsChart:
    """The p50 and p95 duration of each day's finished runs, from `first` to `last`."""
    frame, slot, all_days = _day_frame(first, last, "duration")
    position = {day: i for i, day in enumerate(all_days)}
    shown = [d for d in days if d.day in position]
    highest = max((d.p95 for d in shown), default=0.0)
    top, step = _nice_top(max(highest, 1.0), 4)
    frame = replace(frame, y_ticks=_y_ticks(frame, top, step, "duration"))
    series = []
    for name in ("p50", "p95"):
        dots = []
        for d in shown:
            value: float = getattr(d, name)
            dots.append(
                Dot(
                    x=round(frame.left + (position[d.day] + 0.5) * slot, 1),
                    y=round(frame.baseline - value / top * frame.plot_height, 1),
                    title=f"{d.day.isoformat()}: {name} {duration_text(value)} ({d.runs} runs)",
                )
            )
        series.append(Series(name, " ".join(f"{d.x},{d.y}" for d in dots), dots))
    return DurationsChart(frame, series, sum(d.runs for d in shown))
