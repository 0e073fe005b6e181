"""The `by` field of a write: who acts, when several people share a token."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

#: Who acts, when several people share a token: recorded after the token's name
#: (see `ade_api.http.auth.actor`).
By = Annotated[
    str | None, Field(default=None, max_length=255, description="who, if the token is shared")
]
