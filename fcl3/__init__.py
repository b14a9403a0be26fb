"""The FCL3 client side: the API's schemas (:mod:`fcl3.schemas`, the one definition the
service also uses), the Python client (:mod:`fcl3.client`: :class:`Client`,
:class:`AsyncClient`, the errors) and the ``fcl3`` command (:mod:`fcl3.cli`). Needs httpx and
pydantic only: no numpy, no server dependencies.

``from fcl3 import Client`` loads the client on first use: the service imports
:mod:`fcl3.schemas` and never loads httpx through this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__

#: What ``from fcl3 import ...`` loads on first use (:data:`fcl3.client.__all__`, but DEFAULT_URL).
_CLIENT_NAMES = (
    *("Client", "AsyncClient", "BatchResult", "Event", "Retries", "FCL3Error", "APIError", "BadRequest"),
    *("Unauthorized", "Forbidden", "NotFound", "Conflict", "PayloadTooLarge", "InvalidInput", "ServerError"),
    *("Unavailable", "ConnectionFailed", "TimedOut", "Gone", "UnsupportedMediaType"),
)
__all__ = ["__version__", *_CLIENT_NAMES]

if TYPE_CHECKING:  # pragma: no cover
    from .client import (  # noqa: F401
        APIError,
        AsyncClient,
        BadRequest,
        BatchResult,
        Client,
        Conflict,
        ConnectionFailed,
        Event,
        FCL3Error,
        Forbidden,
        Gone,
        InvalidInput,
        NotFound,
        PayloadTooLarge,
        Retries,
        ServerError,
        TimedOut,
        Unauthorized,
        Unavailable,
        UnsupportedMediaType,
    )


def __getattr__(name: str) -> Any:
    if name in _CLIENT_NAMES:
        from . import client

        return getattr(client, name)
    raise AttributeError(f"module 'fcl3' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_CLIENT_NAMES])
