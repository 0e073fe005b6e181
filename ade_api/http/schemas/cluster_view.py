"""What the cluster's API sees of its own set-up: providers and settings, never a secret."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ProviderOut(BaseModel):
    """One agent provider as the API's settings and PATH make it (`ade-tasks providers`)."""

    name: str
    ready: bool
    credentials: str | None = Field(description="where its key is set (a name), never the value")
    base_url: str | None
    binary: str | None
    version: str | None
    fixes: list[str]


class ClusterView(BaseModel):
    """The API process's providers (what rule health judges by) and settings that differ from
    their defaults (`ADE_*` names; secrets `(set)`, passwords in URLs `***`)."""

    providers: list[ProviderOut]
    settings: dict[str, str]
