"""GET /healthz (the process answers) and GET /readyz (database, schema and lock reachable)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from service.db import schema_present, store_problem
from service.security import presented_role

router = APIRouter(tags=["health"])


class StoreGone(Exception):
    """The database file this process opened was deleted or replaced (:class:`service.db.StoreFile`)."""


@router.get("/healthz")
async def healthz() -> dict[str, Any]:
    """Liveness: answers as long as the process serves requests (touches nothing else)."""
    return {"status": "ok"}


@router.get("/readyz")
def readyz(request: Request) -> JSONResponse:
    """Readiness: the database answers and holds the schema (an SQLite file is still the one
    the process opened, not deleted or replaced), and the lock backend answers.
    Open: an anonymous caller gets each component's state by name (``ok``, ``unavailable``,
    ``missing``); a caller with a valid key (or any caller when no key is configured) also
    gets the details (the lock backend, the error), which may name hosts and ports."""
    state = request.app.state
    redact = state.redact
    checks: dict[str, tuple[str, str]] = {}  # component -> (state, details)
    try:
        gone = store_problem(state.engine)  # an SQLite file deleted or replaced under the process
        if gone is not None:
            raise StoreGone(gone)
        with state.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        checks["database"] = ("ok", "ok")
        if schema_present(state.engine):
            checks["schema"] = ("ok", "ok")
        else:
            checks["schema"] = ("missing", "missing: run `alembic upgrade head`")
    except Exception as exc:  # noqa: BLE001 - any failure means not ready
        first = (str(exc).splitlines() or [""])[0]
        checks["database"] = (
            "unavailable",
            redact(
                f"unavailable: {first}"
                if isinstance(exc, StoreGone)
                else f"unavailable: {type(exc).__name__}: {first[:200]}"
            ),
        )
    try:
        state.locks.ping()
        checks["lock"] = ("ok", f"ok ({state.locks.backend})")
    except Exception as exc:  # noqa: BLE001
        checks["lock"] = ("unavailable", redact(f"unavailable: {str(exc)[:200]}"))
    ok = all(s == "ok" for s, _ in checks.values())
    keyed = presented_role(request) is not None
    shown = {name: details if keyed else s for name, (s, details) in checks.items()}
    return JSONResponse({"status": "ready" if ok else "not ready", **shown}, status_code=200 if ok else 503)
