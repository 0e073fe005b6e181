"""The simulated team's rules: which share of them fires how often, as rule documents.

The mix stands for a large team's automation: most rules are nightly or every few hours, a
tenth hourly, a few every 15 or 5 minutes and a handful every minute; a few percent answer
GitHub pull requests (each on its own repository, so a delivery starts one rule's run) and the
rest run only when an operator asks. Slots are spread over the hour and the day by the rule's
index (`7 * * * *`, `7 3 * * *`), the way a team's schedules are spread once it has felt a
thundering herd at `0 * * * *`; `bench/beat.py` measures that herd on its own.

Pure: no services, so a unit test checks the shares and the arithmetic of the rates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from bench.common import BenchError


@dataclass(frozen=True)
class Kind:
    """One kind of rule: its share of all rules, and how often one of them runs (per minute)."""

    name: str
    share: float
    runs_per_minute: float  # of one rule of this kind; 0 for the event-driven kinds
    cron: Callable[[int], str] | None = None  # the i-th rule of the kind's cron


MIX: tuple[Kind, ...] = (
    Kind("every minute", 0.002, 1.0, lambda _: "* * * * *"),
    Kind("every 5 minutes", 0.010, 1 / 5, lambda i: f"{i % 5}-59/5 * * * *"),
    Kind("every 15 minutes", 0.020, 1 / 15, lambda i: f"{i % 15}-59/15 * * * *"),
    Kind("hourly", 0.100, 1 / 60, lambda i: f"{i % 60} * * * *"),
    Kind("every 6 hours", 0.150, 1 / 360, lambda i: f"{i % 60} {(i // 60) % 6}-23/6 * * *"),
    Kind("daily", 0.600, 1 / 1440, lambda i: f"{i % 60} {(i // 60) % 24} * * *"),
    Kind("github.pr_opened", 0.040, 0.0),
    Kind("manual only", 0.078, 0.0),
)
WEBHOOK_KIND = "github.pr_opened"
MANUAL_KIND = "manual only"
STEP = {"kind": "built-in", "actions": [{"type": "run-command", "command": "true"}]}


def counts(rules: int) -> dict[str, int]:
    """How many of `rules` rules each kind gets (rounded; the last kind takes the remainder)."""
    if rules < len(MIX):
        raise BenchError(f"--rules {rules}: the mix needs at least {len(MIX)} rules, one per kind")
    if abs(sum(kind.share for kind in MIX) - 1.0) > 1e-9:
        raise BenchError("the shares of the rule mix do not add up to 1")
    result = {kind.name: max(1, round(rules * kind.share)) for kind in MIX[:-1]}
    result[MIX[-1].name] = rules - sum(result.values())
    return result


def cron_runs_per_second(rules: int, speed: float) -> float:
    """The schedule slots per real second that `rules` rules of the mix fire at `speed`."""
    per_kind = counts(rules)
    return sum(per_kind[k.name] * k.runs_per_minute for k in MIX) / 60 * speed


def rule_id(index: int) -> str:
    return f"sim-{index:06d}"


def repo_of(webhook_index: int) -> str:
    """The repository the `webhook_index`-th webhook rule listens to."""
    return f"sim/repo-{webhook_index:05d}"


@dataclass(frozen=True)
class Layout:
    """Which rule ids answer webhooks (by repository) and which take manual runs."""

    webhook_repos: tuple[str, ...]
    manual_rules: tuple[str, ...]


def documents(rules: int) -> tuple[list[dict[str, object]], Layout]:
    """The rule documents of the mix, numbered from 0, and which of them events reach."""
    docs: list[dict[str, object]] = []
    repos: list[str] = []
    manual: list[str] = []
    for kind, within, index in _assign(rules):
        triggers: list[dict[str, object]]
        if kind.cron is not None:
            triggers = [{"type": "schedule", "cron": kind.cron(within)}]
        elif kind.name == WEBHOOK_KIND:
            repos.append(repo_of(within))
            triggers = [{"type": WEBHOOK_KIND, "repo": repos[-1]}]
        else:
            manual.append(rule_id(index))
            triggers = [{"type": "manual"}]
        docs.append({"id": rule_id(index), "triggers": triggers, "execution": STEP})
    return docs, Layout(tuple(repos), tuple(manual))


def _assign(rules: int) -> Iterator[tuple[Kind, int, int]]:
    """(kind, index within the kind, rule index), the kinds interleaved so that any prefix of
    the rule ids holds every kind in its share."""
    per_kind = counts(rules)
    given = dict.fromkeys(per_kind, 0)
    for index in range(rules):
        # The kind furthest behind its share so far (a largest-remainder interleave).
        kind = max(MIX, key=lambda k: per_kind[k.name] * (index + 1) / rules - given[k.name])
        yield kind, given[kind.name], index
        given[kind.name] += 1
