"""Commands run in their own process group: timeouts kill every descendant, output stays capped."""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

from ade_tasks.secrets import Masker
from ade_workers.process import OUTPUT_CAP, CappedOutput, run_process

ENV = {"PATH": os.environ["PATH"]}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def wait_dead(pids: list[int], deadline: float = 5.0) -> list[int]:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        survivors = [p for p in pids if alive(p)]
        if not survivors:
            return []
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def test_timeout_kills_the_whole_process_group_including_grandchildren(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = f"sleep 999 & echo $! >> {pids}; sh -c 'sleep 999 & echo $! >> {pids}; wait' & wait"
    started = time.monotonic()
    result = run_process(
        ["/bin/sh", "-c", script], cwd=tmp_path, env=ENV, timeout=1.0, kill_grace=0.5
    )
    assert result.timed_out and result.exit_code is None
    assert time.monotonic() - started < 5
    descendants = [int(line) for line in pids.read_text().split()]
    assert len(descendants) == 2
    assert wait_dead(descendants) == []


def test_term_is_tried_before_kill(tmp_path: Path) -> None:
    marker = tmp_path / "got-term"
    script = f"trap 'echo term > {marker}; exit 0' TERM; while true; do sleep 0.05; done"
    result = run_process(
        ["/bin/sh", "-c", script], cwd=tmp_path, env=ENV, timeout=0.5, kill_grace=3
    )
    assert result.timed_out
    assert marker.read_text().strip() == "term"


def test_background_processes_do_not_outlive_a_finished_command(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    result = run_process(
        ["/bin/sh", "-c", f"sleep 999 > /dev/null 2>&1 & echo $! > {pids}; echo done"],
        cwd=tmp_path,
        env=ENV,
        timeout=10,
    )
    assert result.exit_code == 0 and result.output == "done\n"
    assert wait_dead([int(pids.read_text())]) == []


def test_ten_megabytes_of_output_are_capped_and_memory_stays_flat(tmp_path: Path) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = run_process(
        ["/bin/sh", "-c", "head -c 10000000 /dev/zero | tr '\\0' x; echo; echo THE-END"],
        cwd=tmp_path,
        env=ENV,
        timeout=30,
    )
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert result.exit_code == 0
    assert len(result.output) <= OUTPUT_CAP + 100
    assert result.output.startswith("x" * 1000)
    assert result.output.rstrip().endswith("THE-END")
    assert "characters omitted" in result.output
    assert grown_kib < 30_000, f"peak RSS grew by {grown_kib} KiB"


def test_stop_request_ends_the_command(tmp_path: Path) -> None:
    deadline = time.monotonic() + 0.5
    result = run_process(
        ["sleep", "30"],
        cwd=tmp_path,
        env=ENV,
        timeout=30,
        kill_grace=0.5,
        should_stop=lambda: time.monotonic() > deadline,
    )
    assert result.cancelled and result.duration < 5


def test_environment_is_exactly_what_was_passed(tmp_path: Path) -> None:
    result = run_process(["/usr/bin/env"], cwd=tmp_path, env={"ONLY": "this"}, timeout=5)
    assert result.output.strip().splitlines() == ["ONLY=this"]


def test_capped_output_keeps_head_and_tail_exactly() -> None:
    out = CappedOutput(cap=10)
    for chunk in ["abc", "defgh", "ijklmnop", "qrstuvwxyz"]:
        out.write(chunk)
    assert out.dropped == 16
    assert out.text() == "abcde\n[... 16 characters omitted ...]\nvwxyz"
    small = CappedOutput(cap=10)
    small.write("hello")
    assert small.text() == "hello" and small.dropped == 0


SECRET = 'sk-"live"\\9f3é'  # quotes, a backslash and non-ASCII: JSON and repr escape it differently
MASKED_ENV = {**ENV, "TOKEN": SECRET, "PYTHONIOENCODING": "utf-8"}


def assert_masked(output: str) -> None:
    assert "***" in output
    assert SECRET not in output
    assert "sk-" not in output  # not even the start of it


def run_masked(tmp_path: Path, argv: list[str], cap: int = OUTPUT_CAP) -> str:
    result = run_process(
        argv, cwd=tmp_path, env=MASKED_ENV, timeout=10, cap=cap, masker=Masker([SECRET])
    )
    return result.output


def test_a_printed_secret_is_masked(tmp_path: Path) -> None:
    output = run_masked(tmp_path, ["/bin/sh", "-c", 'echo "token: $TOKEN"'])
    assert output == "token: ***\n"


def test_a_secret_written_in_two_chunks_is_masked(tmp_path: Path) -> None:
    script = 'printf "%s" "${TOKEN%%live*}"; sleep 0.2; printf "%s\\n" "live${TOKEN#*live}"'
    output = run_masked(tmp_path, ["/bin/sh", "-c", script])
    assert output == "***\n"


def test_a_secret_inside_json_is_masked(tmp_path: Path) -> None:
    code = "import json, os; print(json.dumps({'token': os.environ['TOKEN']}))"
    output = run_masked(tmp_path, [sys.executable, "-c", code])
    assert output == '{"token": "***"}\n'


def test_a_secret_inside_a_traceback_is_masked(tmp_path: Path) -> None:
    code = f"import os; x = {SECRET!r}; raise KeyError(os.environ['TOKEN'])"
    output = run_masked(tmp_path, [sys.executable, "-c", code])
    assert output.rstrip().endswith("KeyError: '***'")  # KeyError shows the repr
    assert_masked(output)
    code = "import os; raise ValueError(os.environ['TOKEN'])"
    output = run_masked(tmp_path, [sys.executable, "-c", code])
    assert output.rstrip().endswith("ValueError: ***")
    assert_masked(output)


def test_a_secret_across_the_cap_boundary_leaves_no_prefix(tmp_path: Path) -> None:
    script = 'printf "%s" "0123456$TOKEN"; head -c 1000 /dev/zero | tr "\\0" x; echo "$TOKEN"'
    output = run_masked(tmp_path, ["/bin/sh", "-c", script], cap=20)
    assert output.startswith("0123456***")
    assert output.endswith("xxxx***\n")
    assert_masked(output)


def test_an_empty_masker_changes_nothing(tmp_path: Path) -> None:
    result = run_process(
        ["/bin/sh", "-c", 'echo "$TOKEN"'],
        cwd=tmp_path,
        env=MASKED_ENV,
        timeout=10,
        masker=Masker.none(),
    )
    assert result.output == SECRET + "\n"


def test_ten_megabytes_of_masked_output_stay_capped_and_fast(tmp_path: Path) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    output = run_masked(
        tmp_path,
        ["/bin/sh", "-c", 'head -c 10000000 /dev/zero | tr "\\0" x; echo "$TOKEN"; echo THE-END'],
    )
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert output.rstrip().endswith("x***\nTHE-END")
    assert len(output) <= OUTPUT_CAP + 100
    assert time.monotonic() - started < 10
    assert grown_kib < 30_000, f"peak RSS grew by {grown_kib} KiB"
