"""The bare route of the service benchmark: a plain FastAPI app with one route returning a
constant, served by the same uvicorn command as the service (``benchmarks.bare_app:app``).
It is the ceiling of the HTTP stack on this machine: no middleware, no dependency, no model."""
from __future__ import annotations

from fastapi import FastAPI

app = FastAPI()


@app.get("/")
async def bare() -> dict:
    return {"status": "ok"}
