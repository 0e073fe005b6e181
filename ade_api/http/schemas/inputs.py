"""Pending inputs (an agent's question or tool call, a gate) and the operator's answer."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ade_api.http.schemas.actor import By
from ade_api.http.schemas.runs import ApprovalOut, RunOut
from ade_tasks.states import Answer


class InputAnswer(BaseModel):
    """An operator's answer to a pending input."""

    model_config = ConfigDict(extra="forbid")

    answer: Answer
    by: By = None
    note: str | None = Field(default=None, max_length=4000)


class AnsweredInput(BaseModel):
    """The input as answered, and its run as it now stands."""

    input: ApprovalOut
    run: RunOut
