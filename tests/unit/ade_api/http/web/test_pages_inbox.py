"""The inbox page's markup: each kind of pending input with its own buttons for operators, an
agent's question asked for a typed answer, no form at all for a viewer (no services: rows in,
HTML out)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from ade_api.http.web.pages import TEMPLATES
from ade_api.http.web.run_actions import BUTTONS, Waiting
from ade_tasks.db.schema import QUESTION_TOOL, ApprovalRow, RunRow

AT = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


def _waiting(input_id: int, tool: str | None, arguments: dict[str, str] | None) -> Waiting:
    run = RunRow(id=f"00000000-0000-0000-0000-00000000000{input_id}", rule_id="review")
    row = ApprovalRow(
        id=input_id, run_id=run.id, step_index=0, reason="needs a person", status="pending",
        tool_call_id=f"call-{input_id}" if tool else None, tool=tool, arguments=arguments,
        requested_at=AT, approvals_needed=1,
    )  # fmt: skip
    return Waiting(row, run)


def _inbox(can_act: bool) -> str:
    gate = _waiting(1, None, None)
    call = _waiting(2, "bash", {"command": "make deploy"})
    question = _waiting(3, QUESTION_TOOL, {"question": "Which <branch>?"})
    return TEMPLATES.env.get_template("inbox.html").render(
        title="Inbox", principal=None, can_act=can_act, live=False, kill_switch="",
        approvals=[gate, call], questions=[question], buttons=BUTTONS,
    )  # fmt: skip


def _buttons(html: str, input_id: int) -> list[str]:
    item = re.search(rf'id="inbox-input-{input_id}".*?</div>', html, re.S)
    assert item, input_id
    return re.findall(r'<button type="submit" name="answer" value="(\w+)"', item[0])


def test_each_kind_of_input_has_its_answers_and_returns_to_the_inbox() -> None:
    html = _inbox(can_act=True)
    assert _buttons(html, 1) == ["accept", "decline"]
    assert _buttons(html, 2) == ["accept", "accept_for_session", "decline"]
    assert _buttons(html, 3) == ["accept", "decline"]
    assert html.count('<input type="hidden" name="back" value="/ui/inbox">') == 3
    assert 'action="/ui/inputs/3/answer"' in html
    assert "Which &lt;branch&gt;?" in html  # the question, escaped, with a field for the answer
    assert re.search(
        r'id="inbox-input-3".*?<label>Answer <input type="text" name="note"', html, re.S
    )
    assert "make deploy" in html


def test_a_viewer_sees_the_inbox_without_a_form() -> None:
    html = _inbox(can_act=False)
    assert html.count('class="box inbox-item"') == 3
    assert "<form" not in html and "<button" not in html
    assert "Answering needs an operator token." in html
