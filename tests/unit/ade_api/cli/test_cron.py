"""`ade-tasks cron "EXPR"` previews any expression with the beats' evaluator, without a rule or a
server: the next fires in local time and UTC with daylight-saving moves marked, or the refusal
with the field and what to write."""

from __future__ import annotations

import json
import subprocess
import sys

from click.testing import CliRunner

from ade_api.cli import main


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["cron", *args])
    return result.exit_code, result.output


def test_fires_are_listed_local_and_utc_with_a_dst_move_marked() -> None:
    code, output = run(
        "30 2 * * *", "--tz", "Europe/Berlin", "--from", "2026-03-27T12:00Z", "-n", "3"
    )
    assert code == 0, output
    assert output.splitlines() == [
        "cron '30 2 * * *' in Europe/Berlin (day_match: all (default), dst_gap: shift (default), "
        "dst_repeat: first (default))",
        "  2026-03-28 02:30 Sat CET    2026-03-28 01:30Z",
        "  2026-03-29 03:00 Sun CEST   2026-03-29 01:00Z  moved: 02:30 does not exist that day "
        "(clocks jump to 03:00); dst_gap: shift",
        "  2026-03-30 02:30 Mon CEST   2026-03-30 00:30Z",
    ]


def test_the_trigger_options_apply() -> None:
    code, output = run(
        "30 2 * * *", "--tz", "Europe/Berlin", "--from", "2026-10-24T12:00Z", "-n", "2",
        "--dst-repeat", "both",
    )  # fmt: skip
    assert code == 0, output
    assert "dst_repeat: both)" in output.splitlines()[0]
    assert "doubled: 02:30 happens twice (clocks go back); first of 2 fires" in output
    assert "doubled: 02:30 happens twice (clocks go back); second of 2 fires" in output


def test_a_refused_expression_names_the_field_and_what_to_write() -> None:
    code, output = run("0 0 15W * *")
    assert code == 1
    assert output == (
        "error: cron '0 0 15W * *': day-of-month field '15W': `W` (nearest weekday) is not "
        "supported; write the day itself, e.g. 15\n"
    )


def test_json_lists_twenty_february_29ths() -> None:
    code, output = run("0 0 29 2 *", "--from", "2026-12-07T00:00Z", "-n", "20", "--json")
    assert code == 0, output
    answer = json.loads(output)
    assert [fire["utc"][:4] for fire in answer["fires"]][-3:] == ["2096", "2104", "2108"]
    assert answer["day_match"] == "all" and answer["fires"][0]["dst"] is None


def test_a_time_without_a_zone_is_refused() -> None:
    code, output = run("* * * * *", "--from", "2026-03-29T01:00")
    assert code == 2 and "has no time zone" in output


def test_the_preview_loads_no_database_or_celery() -> None:
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from ade_api.cli import main; "
            "main(['cron', '0 3 * * *', '-n', '1'], standalone_mode=False); "
            "print(sorted(m for m in ('sqlalchemy', 'celery', 'fastapi') if m in sys.modules))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.splitlines()[-1] == "[]"
