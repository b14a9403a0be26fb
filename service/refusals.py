"""A write refused with nothing changed, answered with its own status and the body
``{"detail": message, **extra}`` (a label request: :mod:`service.labels`; a take-back:
:mod:`service.take_back`)."""
from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse


class Refused(Exception):
    """Refused with nothing changed: ``status``, ``message`` and the body's extra fields."""

    status = 422

    def __init__(self, message: str, **extra: Any):
        super().__init__(message)
        self.message, self.extra = message, extra

    def response(self, redact, version_field: str) -> JSONResponse:
        """The answer: the message (scrubbed by ``redact``) and the extra fields; the header
        ``X-Model-Version`` from the extra field ``version_field`` when there is one."""
        headers = {"X-Model-Version": str(self.extra[version_field])} if version_field in self.extra else None
        return JSONResponse({"detail": redact(self.message), **self.extra}, status_code=self.status, headers=headers)
