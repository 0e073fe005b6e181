"""Commands run in containers of their own: timeouts kill every descendant, daemons that left the
session included, nothing outlives the worker, and output stays capped."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ade_tasks.secrets import Masker
from ade_workers.containment.contained_process import ContainedProcess
from ade_workers.containment.process import OUTPUT_CAP, CappedOutput, run_process
from tests.support import pid_alive, wait_until

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


def test_timeout_kills_every_descendant_including_grandchildren(tmp_path: Path) -> None:
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


# A classic daemon: fork, setsid, fork again, and ignore SIGTERM, so only SIGKILL ends it.
DAEMON = """
import os, signal, sys, time
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(sys.argv[1], "a") as pids:
    pids.write(f"{os.getpid()}\\n")
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
time.sleep(300)
"""


def escaping_command(tmp_path: Path, then: str) -> tuple[list[str], Path]:
    """A shell that starts three daemons that leave its session (`setsid`, `setsid -f`, a
    double fork), writes their pids and then its own, prints `started` and runs `then`."""
    pids = tmp_path / "pids"
    pids.touch()
    daemon = tmp_path / "daemon.py"
    daemon.write_text(DAEMON)
    script = f"""
        setsid sh -c 'echo $$ >> {pids}; exec sleep 300' &
        setsid -f sh -c 'echo $$ >> {pids}; exec sleep 300'
        {sys.executable} -I -S {daemon} {pids}
        while [ "$(wc -l < {pids})" -lt 3 ]; do sleep 0.01; done
        echo $$ >> {pids}
        echo started
        {then}
    """
    return ["/bin/sh", "-c", script], pids


def pids_in(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()]


def survivors(pids: list[int]) -> list[int]:
    return [pid for pid in pids if pid_alive(pid)]


def test_daemons_that_left_the_session_are_killed_on_timeout(tmp_path: Path) -> None:
    argv, pids = escaping_command(tmp_path, then="sleep 300")

    result = run_process(argv, cwd=tmp_path, env=ENV, timeout=3, kill_grace=0.5)

    assert result.timed_out and result.exit_code is None
    assert result.output == "started\n"
    assert len(pids_in(pids)) == 4
    assert survivors(pids_in(pids)) == []  # gone when run_process returns, not a moment later


def test_daemons_that_left_the_session_are_killed_on_cancel(tmp_path: Path) -> None:
    argv, pids = escaping_command(tmp_path, then="sleep 300")

    result = run_process(
        argv,
        cwd=tmp_path,
        env=ENV,
        timeout=60,
        kill_grace=0.5,
        should_stop=lambda: len(pids_in(pids)) == 4,
    )

    assert result.cancelled and result.exit_code is None
    assert survivors(pids_in(pids)) == []


def test_daemons_that_left_the_session_die_when_the_command_exits(tmp_path: Path) -> None:
    argv, pids = escaping_command(tmp_path, then="exit 3")

    result = run_process(argv, cwd=tmp_path, env=ENV, timeout=60)

    assert result.exit_code == 3 and not (result.timed_out or result.cancelled)
    assert result.output == "started\n"
    assert survivors(pids_in(pids)) == []
    assert result.duration < 5  # daemons holding the output pipe do not keep the step waiting


def test_a_command_that_kills_its_own_process_group_leaves_nothing_behind(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = f"setsid -f sh -c 'echo $$ > {pids}; exec sleep 300'; while [ ! -s {pids} ]; do sleep 0.01; done; kill -9 0"

    result = run_process(["/bin/sh", "-c", script], cwd=tmp_path, env=ENV, timeout=60)

    assert result.exit_code == -signal.SIGKILL
    assert survivors(pids_in(pids)) == []


VICTIM = """
import json, os, sys, threading
from pathlib import Path
from ade_workers.containment.process import run_process

argv, cwd = json.loads(sys.argv[1]), Path(sys.argv[2])
# From a thread, as a worker's pool may call it: the container must notice the *process* dying.
runner = threading.Thread(
    target=run_process, args=(argv,), kwargs={"cwd": cwd, "env": os.environ, "timeout": 600}
)
runner.start()
runner.join()
"""


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[1])


def test_nothing_of_a_command_survives_when_its_worker_is_sigkilled(tmp_path: Path) -> None:
    argv, pids = escaping_command(tmp_path, then="sleep 300")
    worker = subprocess.Popen(
        [sys.executable, "-c", VICTIM, json.dumps(argv), str(tmp_path)],
        cwd=Path(__file__).resolve().parents[4],
        env=ENV,
        start_new_session=True,
    )
    try:
        command = wait_until(lambda: len(pids_in(pids)) == 4 and pids_in(pids)[3], 30, "start")
        supervisor = parent_of(command)
        assert supervisor != worker.pid and os.getpgid(supervisor) != os.getpgid(worker.pid)

        worker.kill()
        worker.wait()

        everything = [*pids_in(pids), supervisor]
        wait_until(lambda: not survivors(everything), 5, f"{everything} to die with the worker")
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_concurrent_commands_have_containers_of_their_own(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    argv_a, pids_a = escaping_command(tmp_path / "a", then="sleep 300")
    go = tmp_path / "go"
    daemon_b = tmp_path / "b" / "daemon"
    script_b = (
        f"setsid -f sh -c 'echo $$ > {daemon_b}; exec sleep 300'; "
        f"while [ ! -e {go} ]; do sleep 0.01; done; echo b-done"
    )
    results: dict[str, object] = {}
    b = threading.Thread(
        target=lambda: results.update(
            b=run_process(["/bin/sh", "-c", script_b], cwd=tmp_path, env=ENV, timeout=60)
        )
    )
    b.start()

    a = run_process(
        argv_a,
        cwd=tmp_path,
        env=ENV,
        timeout=60,
        kill_grace=0.5,
        should_stop=lambda: len(pids_in(pids_a)) == 4 and daemon_b.exists(),
    )

    assert a.cancelled and survivors(pids_in(pids_a)) == []
    assert pid_alive(int(daemon_b.read_text()))  # stopping one command left the other alone
    go.touch()
    b.join(timeout=30)
    result_b = results["b"]
    assert getattr(result_b, "exit_code", None) == 0
    assert getattr(result_b, "output", None) == "b-done\n"
    assert survivors([int(daemon_b.read_text())]) == []


def test_a_program_that_cannot_start_raises_and_the_next_one_runs(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as missing:
        run_process(["no-such-program-here"], cwd=tmp_path, env=ENV, timeout=5)
    assert missing.value.filename == "no-such-program-here"
    with pytest.raises(FileNotFoundError):
        run_process(["true"], cwd=tmp_path / "nowhere", env=ENV, timeout=5)

    assert run_process(["echo", "fine"], cwd=tmp_path, env=ENV, timeout=5).output == "fine\n"


def test_a_supervisor_that_died_while_idle_is_replaced(tmp_path: Path) -> None:
    first = run_process(["/bin/sh", "-c", "echo $PPID"], cwd=tmp_path, env=ENV, timeout=5)
    supervisor = int(first.output)
    os.kill(supervisor, signal.SIGKILL)
    wait_until(lambda: not pid_alive(supervisor), 5, "the idle supervisor to die")

    second = run_process(["/bin/sh", "-c", "echo $PPID"], cwd=tmp_path, env=ENV, timeout=5)

    assert second.exit_code == 0 and int(second.output) != supervisor


def test_a_supervisor_not_kept_for_reuse_ends_with_its_command(tmp_path: Path) -> None:
    probe = ["/bin/sh", "-c", "echo $PPID"]
    kept = int(run_process(probe, cwd=tmp_path, env=ENV, timeout=5).output)

    single = int(run_process(probe, cwd=tmp_path, env=ENV, timeout=5, reuse=False).output)

    assert single == kept  # the idle one served it, and ended with it
    assert wait_dead([single]) == []
    again = int(run_process(probe, cwd=tmp_path, env=ENV, timeout=5).output)
    assert again != single and alive(again)


def test_sigterm_to_the_supervisor_ends_everything_it_holds(tmp_path: Path) -> None:
    argv, pids = escaping_command(tmp_path, then="sleep 300")

    terminated: list[int] = []

    def terminate_the_supervisor() -> bool:
        if len(pids_in(pids)) == 4 and not terminated:
            terminated.append(parent_of(pids_in(pids)[3]))
            os.kill(terminated[0], signal.SIGTERM)  # as a service manager would
        return False

    result = run_process(
        argv,
        cwd=tmp_path,
        env=ENV,
        timeout=60,
        kill_grace=0.5,
        should_stop=terminate_the_supervisor,
    )

    assert result.exit_code == -signal.SIGTERM and not result.cancelled
    assert survivors(pids_in(pids)) == []
    wait_until(lambda: not pid_alive(terminated[0]), 5, "the terminated supervisor to exit")


def test_a_stop_that_crosses_the_end_of_a_command_changes_nothing(tmp_path: Path) -> None:
    probe = ["/bin/sh", "-c", "echo $PPID"]
    with ContainedProcess(probe, cwd=str(tmp_path), env=ENV, kill_grace=1) as process:
        with process.output:
            supervisor = int(process.output.read())
        wait_until(lambda: process.wait(0), 5, "the command to end")
        process.stop()  # too late: the command has ended and been reported
        assert process.finish() == 0

    again = run_process(probe, cwd=tmp_path, env=ENV, timeout=5)

    assert again.exit_code == 0 and int(again.output) == supervisor  # the same one, still fine
