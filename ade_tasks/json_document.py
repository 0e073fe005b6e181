"""The one name for a JSON document's type.

`Any` is honest for a value parsed from JSON (or about to be serialized to it): its shape is
whatever the other side sent, so code narrows it with isinstance where it reads it. Naming the
alias keeps that `Any` in one place, where a reader can see it means "a JSON object", and
leaves every other `Any` in the code suspect.
"""

from __future__ import annotations

from typing import Any

JsonObject = dict[str, Any]
"""A JSON object: keys are strings, values whatever JSON holds."""
