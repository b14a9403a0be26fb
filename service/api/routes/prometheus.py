"""GET /metrics: Prometheus text format (open, like /healthz: put it behind the network's own policy)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from service import metrics

router = APIRouter()


@router.get("/metrics", include_in_schema=False)
def prometheus_metrics() -> Response:
    """Prometheus text format (open, like /healthz: put it behind the network's own policy)."""
    body, content_type = metrics.exposition()
    return Response(body, media_type=content_type)
