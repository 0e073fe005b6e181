"""The cluster's own view of its set-up (`GET /api/v1/cluster/view`), for a CLI in another
shell to show beside its own: a provider this shell lacks may be set up where the cluster runs."""

from __future__ import annotations

from fastapi import APIRouter

from ade_api.http.deps import ServicesDep
from ade_api.http.health_state import provider_statuses
from ade_api.http.schemas.cluster_view import ClusterView, ProviderOut
from ade_tasks.settings_view import settings_view

router = APIRouter(prefix="/api/v1/cluster", tags=["health"])


@router.get("/view")
def cluster_view(services: ServicesDep) -> ClusterView:
    """The agent providers as this API's settings and PATH make them (what rule health judges
    by; workers with other settings may differ) and every setting not at its default, by its
    `ADE_*` name, secrets shown as `(set)`."""
    settings = services.settings
    return ClusterView(
        providers=[
            ProviderOut.model_validate(status.as_dict()) for status in provider_statuses(settings)
        ],
        settings=settings_view(settings),
    )
