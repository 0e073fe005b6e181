"""What a doctor check is, what it finds, and the runner that bounds each one in time.

A check is a function of the shared `Probe` (the settings and the connections the checks share)
returning a `Finding`. The runner calls it in a daemon thread and waits at most the check's
timeout: a database or broker that accepts a connection and then says nothing makes that check
fail with "no answer within N s" while the doctor goes on (the stuck thread dies with the
process). A check whose prerequisite did not pass is skipped, saying which one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypeVar, cast

from pydantic import ValidationError

from ade_tasks.json_document import JsonObject
from ade_tasks.settings import Settings

T = TypeVar("T")


def settings_problems(error: Exception) -> list[str]:
    """Each setting that does not load, by its environment variable: `ADE_X: reason`."""
    if not isinstance(error, ValidationError):
        return [str(error)]  # pydantic-settings' own (a nested value that is not JSON)
    problems = []
    for item in error.errors(include_url=False, include_input=False):
        name = "ADE_" + "__".join(str(part) for part in item["loc"]).upper()
        problems.append(f"{name}: {item['msg'].removeprefix('Value error, ')}")
    return problems


class Verdict(StrEnum):
    """How a check went; only `fail` makes the doctor exit non-zero."""

    OK = "ok"
    WARN = "warn"  # works, but something a user of the cluster would want to know
    FAIL = "fail"
    SKIP = "skip"  # not checked: a prerequisite failed, or it does not apply here


@dataclass(frozen=True)
class Finding:
    """What a check found, and what to do about it (empty when nothing needs doing)."""

    verdict: Verdict
    detail: str
    fix: str = ""


@dataclass
class Probe:
    """What the checks share: the settings (None when they do not load, with the reason), the
    per-check time bound, and resources a check opens for the ones after it."""

    settings: Settings | None
    timeout: float
    settings_error: Exception | None = None
    shared: dict[str, object] = field(default_factory=dict)

    @property
    def loaded(self) -> Settings:
        """The settings; only checks that need `settings` call it."""
        assert self.settings is not None, "a check that reads settings must need `settings`"
        return self.settings

    def resource(self, name: str, make: Callable[[], T]) -> T:
        """A resource the checks share (the engine, the Celery app), made on first use."""
        if name not in self.shared:
            self.shared[name] = make()
        # Each name is made by one `make`, so what it holds is what that `make` returns.
        return cast(T, self.shared[name])


@dataclass(frozen=True)
class Check:
    """One check: its name (as printed), what it proves, the probe, and the checks that must pass
    before it means anything."""

    name: str
    title: str
    run: Callable[[Probe], Finding]
    needs: tuple[str, ...] = ()


@dataclass(frozen=True)
class CheckResult:
    """A check's finding with its name and how long it took."""

    name: str
    title: str
    verdict: Verdict
    detail: str
    fix: str
    seconds: float

    def as_dict(self) -> JsonObject:
        """A JSON-ready form."""
        return {
            "name": self.name,
            "title": self.title,
            "verdict": self.verdict.value,
            "detail": self.detail,
            "fix": self.fix,
            "seconds": round(self.seconds, 3),
        }


def run_check(check: Check, probe: Probe) -> CheckResult:
    """Run `check` for at most `probe.timeout` seconds; an exception is a failure with its
    message, a check still running at the deadline a failure saying so."""
    outcome: list[Finding] = []
    started = time.monotonic()

    def target() -> None:
        try:
            outcome.append(check.run(probe))
        except Exception as exc:  # a check's own failure is its verdict
            outcome.append(Finding(Verdict.FAIL, f"{type(exc).__name__}: {exc}"))

    worker = threading.Thread(target=target, name=f"doctor-{check.name}", daemon=True)
    worker.start()
    worker.join(probe.timeout)
    if outcome:
        finding = outcome[0]
    else:
        finding = Finding(
            Verdict.FAIL,
            f"no answer within {probe.timeout:g} s (it may hang: a server that accepts "
            "connections but does not answer, or a firewall dropping packets)",
            "check that the service named in the settings runs and answers; "
            "`--timeout` allows slower ones",
        )
    return CheckResult(
        check.name,
        check.title,
        finding.verdict,
        finding.detail,
        finding.fix,
        time.monotonic() - started,
    )


def run_checks(
    checks: Iterable[Check], probe: Probe, on_start: Callable[[Check], None] | None = None
) -> Iterator[CheckResult]:
    """Each check's result in order, as it finishes (`on_start` is told before each one runs,
    for progress); a check whose `needs` did not pass is skipped, naming them."""
    passed: set[str] = set()
    for check in checks:
        if on_start is not None:
            on_start(check)
        missing = [name for name in check.needs if name not in passed]
        if missing:
            yield CheckResult(
                check.name,
                check.title,
                Verdict.SKIP,
                f"not checked: {', '.join(missing)} did not pass",
                "",
                0.0,
            )
            continue
        result = run_check(check, probe)
        if result.verdict in (Verdict.OK, Verdict.WARN):
            passed.add(check.name)
        yield result
