"""The Codex driver: runs `codex app-server` (`codex_session.run_codex`), after refusing what
Codex cannot enforce (`codex_session.unenforceable`), and reads its result into the outcome.
Codex has no system prompt flag: the `system` text goes before the prompt (`system_in_prompt`)."""

from __future__ import annotations

from ade_workers.agents.cli.codex_session import capabilities, run_codex, unenforceable
from ade_workers.agents.cli.facts import CODEX
from ade_workers.agents.cli.outcome import (
    NOISE_LINES,
    CliDriver,
    CliRun,
    CliSessionOutcome,
    session_outcome,
)
from ade_workers.agents.http_session import SessionStatus

CODEX_STATUS: dict[str, SessionStatus] = {
    "completed": "completed",
    "timed_out": "timed_out",
    "budget_exceeded": "token_budget",
    "failed": "failed",
}


def run(call: CliRun) -> CliSessionOutcome:
    """Run codex and read its result into events and the outcome."""
    codex = run_codex(
        call.execution,
        call.setup,
        prompt=call.prompt,
        deadline=call.deadline,
        should_stop=call.should_stop,
        kill_grace=call.kill_grace,
    )
    ran, stop, record = codex.outcome, codex.stop, call.record
    record(
        "agent.cli_result",
        {
            "exit_code": ran.exit_code,
            "session_id": ran.thread_id,
            "usage": {
                "input_tokens": ran.input_tokens,
                "output_tokens": ran.output_tokens,
                "cached_input_tokens": ran.cached_input_tokens,
            },
            "errors": [ran.error] if ran.error else [],
            "stderr": ran.stderr[-NOISE_LINES:],
        },
    )
    outcome = session_outcome(
        (CODEX_STATUS[ran.status], ran.error),
        stop,
        ran.final_text,
        max(codex.spend_input, ran.input_tokens),
        max(codex.spend_output, ran.output_tokens),
        1,
        record,
    )
    return CliSessionOutcome(outcome, None, call.capabilities)


DRIVER = CliDriver(CODEX, capabilities=capabilities, refusal=unenforceable, run=run)
