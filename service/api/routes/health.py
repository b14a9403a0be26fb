"""GET /healthz (the process answers) and GET /readyz (database, schema and lock reachable)."""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from ...db import schema_present

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict:
    """Liveness: answers as long as the process serves requests (touches nothing else)."""
    return {"status": "ok"}


@router.get("/readyz")
def readyz(request: Request) -> JSONResponse:
    """Readiness: the database answers and holds the schema, and the lock backend answers."""
    state = request.app.state
    redact = state.redact
    checks: dict[str, str] = {}
    ok = True
    try:
        with state.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        checks["database"] = "ok"
        if schema_present(state.engine):
            checks["schema"] = "ok"
        else:
            checks["schema"] = "missing: run `alembic upgrade head`"
            ok = False
    except Exception as exc:  # noqa: BLE001 - any failure means not ready
        checks["database"] = redact(f"unavailable: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}")
        ok = False
    try:
        state.locks.ping()
        checks["lock"] = f"ok ({state.locks.backend})"
    except Exception as exc:  # noqa: BLE001
        checks["lock"] = redact(f"unavailable: {str(exc)[:200]}")
        ok = False
    return JSONResponse({"status": "ready" if ok else "not ready", **checks}, status_code=200 if ok else 503)
