"""Where a rule's result goes (disposition, outputs), how it is verified, and the inputs a
manual run takes."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import (
    Field,
    model_validator,
)

from ade_tasks.rules.document import REPO_NAME, Document


class Disposition(StrEnum):
    """Where a finished run's result goes."""

    EVIDENCE_ONLY = "evidence-only"
    COMMENT_ONLY = "comment-only"
    OPEN_PR = "open-pr"
    NOTIFY = "notify"


class Outputs(Document):
    """How the run's result is published (see the README's "Outputs" section).

    `comment-only` comments on the triggering GitHub PR or issue (else the result stays in the
    run log), `open-pr` pushes the run's lane branch to `remote` and opens a draft PR on `repo`
    (default: the trigger's repository), `notify` posts to a Slack-compatible webhook whose URL
    is a secret (`notify_url: ${env:NAME}`). GitHub and webhook calls are retried `retry` times
    with exponential backoff from 400 ms.
    """

    disposition: Disposition = Disposition.EVIDENCE_ONLY
    notify_url: str | None = None
    repo: str | None = Field(default=None, pattern=REPO_NAME)
    remote: str = "origin"
    pr_title: str = "{{rule.name}}"
    pr_base: str | None = None
    retry: int = Field(default=3, ge=0, le=5)

    @model_validator(mode="after")
    def _notify_needs_url(self) -> Outputs:
        if self.disposition is Disposition.NOTIFY and not self.notify_url:
            raise ValueError(
                "disposition notify needs notify_url, e.g. notify_url: ${env:SLACK_WEBHOOK_URL}"
            )
        if self.notify_url is not None and "${env:" not in self.notify_url:
            raise ValueError(
                "notify_url is a credential: name it as a secret the workers hold, e.g. "
                "notify_url: ${env:SLACK_WEBHOOK_URL}, never the URL itself"
            )
        return self


class Verification(Document):
    """A command whose success verifies the run's change before publishing.

    It runs after the steps (in the run's lane, if it has one) as step `verify`. When it fails,
    nothing is published and the run lands in `verification-required`; with `required` the run
    also fails. `required` without a command leaves every run `verification-required`.
    """

    command: str | None = None
    required: bool = False


class InputSpec(Document):
    """A typed input a manual run may supply (like GitHub's workflow_dispatch).

    `position` is the input's place on the Run-now form; a rule need not write it: it is set
    from the order the inputs are declared in (`in_declared_order`), because the stored
    document keeps no key order (PostgreSQL's JSONB, and the sorted JSON of a content hash).
    """

    type: Literal["string", "boolean", "number", "choice"] = "string"
    description: str = ""
    required: bool = False
    default: str | bool | float | None = None
    options: list[str] = Field(default_factory=list)
    position: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _choice_has_options(self) -> InputSpec:
        if self.type == "choice" and not self.options:
            raise ValueError("a choice input needs a non-empty `options` list")
        problem = self._default_problem()
        if problem:
            raise ValueError(problem)
        return self

    def _default_problem(self) -> str | None:
        """Why `default` is not a value of the input's type (a run would fail on it), or None:
        checked at validation so a bad default never waits for the first manual run."""
        default = self.default
        if default is None:
            return None
        if self.type == "boolean" and not isinstance(default, bool):
            if str(default).strip().lower() not in TRUE_WORDS | FALSE_WORDS:
                return f"default {default!r} is not a boolean: write true or false"
        if self.type == "number":
            if isinstance(default, bool) or not _is_number(default):
                return f"default {default!r} is not a number: write one, e.g. 2 or 0.5"
        if self.type == "choice" and str(default) not in self.options:
            return (
                f"default {default!r} is not one of the options ({', '.join(self.options)}): "
                "name one of them or drop the default"
            )
        return None


def in_declared_order(inputs: object) -> object:
    """A rule's `inputs` (name -> spec, as written) in the order they are declared, or by the
    `position` a stored document gave each, with each spec's place written into `position`,
    so the order survives a stored document's sorted keys. Anything else (a spec that is no
    mapping, a position that is no whole number) is left to validation to refuse."""
    if not isinstance(inputs, dict) or not all(
        isinstance(spec, dict) and _whole_or_none(spec.get("position")) for spec in inputs.values()
    ):
        return inputs
    places = sorted(
        (index if spec.get("position") is None else spec["position"], index, name)
        for index, (name, spec) in enumerate(inputs.items())
    )
    return {name: {**inputs[name], "position": n} for n, (_, _, name) in enumerate(places)}


def _whole_or_none(value: object) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


TRUE_WORDS = frozenset({"true", "yes", "1", "on"})
FALSE_WORDS = frozenset({"false", "no", "0", "off"})
"""The words a boolean input takes for true and false (`ade_tasks.rules.inputs`), in lower case."""


def _is_number(value: object) -> bool:
    try:
        float(str(value))
    except ValueError:
        return False
    return True
