"""GET /ui: the dashboard, a static page served from the installed package (no build step,
no CDN) that reads the API with the key the user gives it."""
from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["dashboard"], include_in_schema=False)
