"""The OpenAPI document's error answers: every 4xx and 5xx of every route declares the one
error envelope, :class:`fcl3.schemas.ErrorOut`, in place of FastAPI's own validation schema."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

from fcl3.schemas import ErrorOut

_REF = "#/components/schemas/{model}"
#: FastAPI's schemas of its default 422, which the envelope replaces.
_FASTAPI_ERRORS = ("HTTPValidationError", "ValidationError")
_UNSUPPORTED = {"description": "A body of another media type than the route reads (JSON; `text/csv` where listed)."}


def declare_error_envelope(app: FastAPI) -> None:
    """Make ``app.openapi()`` declare :class:`ErrorOut` for every error answer."""
    build: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            with_envelope(build())
        assert app.openapi_schema is not None
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def with_envelope(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` (changed in place) with the envelope as the body of every error answer."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    envelope = ErrorOut.model_json_schema(ref_template=_REF)
    schemas.update(envelope.pop("$defs", {}))
    schemas["ErrorOut"] = envelope
    for name in _FASTAPI_ERRORS:
        schemas.pop(name, None)
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses = operation["responses"]
            if "application/json" in (operation.get("requestBody") or {}).get("content", {}):
                responses.setdefault("415", dict(_UNSUPPORTED))
            for status, response in responses.items():
                if str(status)[0] in "45":
                    content = response.setdefault("content", {}).setdefault("application/json", {})
                    content["schema"] = {"$ref": _REF.format(model="ErrorOut")}
    return document
