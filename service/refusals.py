"""A write refused with nothing changed, answered with its own status and the body
``{"detail": message, **extra}`` (a label request: :mod:`service.labels`; a take-back:
:mod:`service.take_back`), by the handler of :func:`service.errors.install_error_handlers`."""

from __future__ import annotations

from typing import Any, ClassVar


class Refused(Exception):
    """Refused with nothing changed: ``status``, ``message`` and the body's extra fields; the
    extra field ``version_field``, when there is one, is also the header ``X-Model-Version``."""

    status: ClassVar[int] = 422
    version_field: ClassVar[str] = "version"

    def __init__(self, message: str, **extra: Any):
        super().__init__(message)
        self.message, self.extra = message, extra
