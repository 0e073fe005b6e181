"""The web page's chart geometry (ade_api.http.web.charts) and its SVG templates, without a server:
scales, ticks, stacking, the live timeline's headroom, and that data in labels is escaped."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

from ade_api.http.web import charts
from ade_api.http.web.pages import TEMPLATES
from ade_tasks.db.history import DayDurations, DayOutcomes, RecentRun

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def render_macro(name: str, value: object) -> str:
    module = TEMPLATES.env.get_template("_charts.html").module
    return str(getattr(module, name)(value))


def test_durations_read_as_a_person_reads_them() -> None:
    assert [charts.duration_text(s) for s in (None, 0.25, 4.24, 185, 7800)] == [
        "-", "250 ms", "4.2 s", "3 m 05 s", "2 h 10 m",
    ]  # fmt: skip


def test_nice_steps_are_one_two_or_five_times_a_power_of_ten() -> None:
    assert [charts.nice_step(span) for span in (1, 7, 45, 130, 0.3)] == [0.2, 2, 10, 50, 0.1]


def test_a_sparkline_puts_the_longest_run_at_the_top_and_marks_the_current_run() -> None:
    runs = [RecentRun("a", 1.0), RecentRun("b", 4.0), RecentRun("c", 2.0)]
    spark = charts.sparkline(runs, current="c", width=100, height=20)
    assert spark is not None
    ys = [dot.y for dot in spark.dots]
    assert ys[1] == min(ys) == 3  # the top padding
    assert [dot.current for dot in spark.dots] == [False, False, True]
    assert spark.title == "last 3 runs: 1.0 s to 4.0 s"
    assert charts.sparkline(runs[:1]) is None  # one point is no line


def test_a_finished_timeline_spans_the_run_and_bars_start_where_their_steps_started() -> None:
    steps = [
        charts.StepSpan(0, "1. build", "succeeded", T0, T0 + timedelta(seconds=4)),
        charts.StepSpan(1, "2. tests", "failed", T0 + timedelta(seconds=4), T0 + timedelta(seconds=10)),
    ]  # fmt: skip
    chart = charts.timeline(steps, [("3. publish", "not run")], T0 + timedelta(seconds=60))
    assert chart is not None
    assert chart.domain == 10  # the run took 10 s; `now` after it plays no part
    build, tests, publish = chart.bars
    assert build.x == chart.frame.left
    assert tests.x == round(chart.frame.left + 4 * chart.scale, 1)
    assert round(build.width + tests.width, 1) == chart.frame.plot_width
    assert not publish.started and publish.status == "not run"
    assert [t.label for t in chart.frame.x_ticks][:2] == ["0", "2.0 s"]
    assert chart.frame.x_label == "seconds since the first step started"


def test_a_running_step_reaches_now_and_the_axis_leaves_it_room_to_grow() -> None:
    steps = [
        charts.StepSpan(0, "1. build", "succeeded", T0, T0 + timedelta(seconds=3)),
        charts.StepSpan(1, "2. tests", "running", T0 + timedelta(seconds=3), None),
    ]
    chart = charts.timeline(steps, [], T0 + timedelta(seconds=8))
    assert chart is not None
    running = chart.bars[1]
    assert running.running and running.start == 3
    assert round(running.x + running.width, 1) == round(chart.frame.left + 8 * chart.scale, 1)
    assert chart.now == 8 and chart.domain >= 10  # headroom for live.js before a redraw
    assert charts.timeline([], [("1. build", "not started")], T0) is None


def test_runs_per_day_stack_by_outcome_on_a_day_axis_with_whole_run_ticks() -> None:
    first, last = date(2026, 2, 1), date(2026, 3, 2)  # 30 days
    days = [
        DayOutcomes(date(2026, 2, 3), {"failed": 1, "succeeded": 2}),
        DayOutcomes(date(2026, 3, 2), {"succeeded": 1}),
    ]
    chart = charts.outcomes_chart(days, first, last)
    assert chart.total == 4 and chart.statuses == ["succeeded", "failed"]
    ok, failed, today = chart.segments
    assert (ok.status, failed.status) == ("succeeded", "failed")
    assert ok.y + ok.height == chart.frame.baseline  # succeeded at the bottom
    assert round(failed.y + failed.height, 1) == ok.y  # failed stacked on top of it
    assert today.x > failed.x
    assert [t.label for t in chart.frame.y_ticks] == ["0", "1", "2", "3"]
    assert chart.frame.x_ticks[-1].label == "03-02"  # the newest day is always labelled
    assert (chart.frame.x_label, chart.frame.y_label) == ("day (UTC)", "runs")


def test_p50_and_p95_are_two_lines_over_the_days_that_had_finished_runs() -> None:
    days = [
        DayDurations(date(2026, 2, 10), 2.0, 9.0, 5),
        DayDurations(date(2026, 2, 11), 3.0, 4.0, 2),
    ]
    chart = charts.durations_chart(days, date(2026, 2, 1), date(2026, 3, 2))
    p50, p95 = chart.series
    assert (p50.name, p95.name, chart.runs) == ("p50", "p95", 7)
    assert p95.dots[0].y < p50.dots[0].y  # higher is longer
    assert p95.dots[0].title == "2026-02-10: p95 9.0 s (5 runs)"
    assert chart.frame.y_label == "duration"
    assert chart.frame.y_ticks[-1].label == "10.0 s"


def test_the_svg_has_labelled_axes_a_title_and_escapes_labels() -> None:
    steps = [charts.StepSpan(0, "1. <b>x</b>", "succeeded", T0, T0 + timedelta(seconds=2))]
    chart = charts.timeline(steps, [("2. next", "not started")], T0)
    svg = render_macro("timeline", chart)
    assert svg.count("<svg") == 1 and "<title>Step timeline: 2 steps</title>" in svg
    assert "seconds since the first step started" in svg and ">step</text>" in svg
    assert "1. &lt;b&gt;x&lt;/b&gt;" in svg and "<b>" not in svg
    assert re.search(r'<rect class="bar bar-succeeded" x="180\.0"', svg)
    assert "not started" in svg
    empty = render_macro("outcomes", charts.outcomes_chart([], date(2026, 2, 1), date(2026, 3, 2)))
    assert "no runs in this window" in empty and "day (UTC)" in empty


def test_a_young_running_step_leaves_the_page_ten_seconds_before_a_redraw() -> None:
    # Given a step half a second into its run (a quarter more would be a redraw every second)
    steps = [charts.StepSpan(0, "1. tests", "running", T0, None)]
    # When its timeline is drawn
    chart = charts.timeline(steps, [], T0 + timedelta(seconds=0.5))
    # Then its axis reaches at least RUNNING_ROOM_SECONDS past now
    assert chart is not None and chart.domain >= 0.5 + charts.RUNNING_ROOM_SECONDS
