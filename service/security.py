"""API keys (``Authorization: Bearer <key>``) and scrubbing of secrets from messages.

Two sets of keys, from the environment (:class:`service.config.Settings`):

* ``API_WRITE_KEYS``: may post data (change the model) and read;
* ``API_READ_KEYS``: predictions, ``/tasks``, ``/model`` only (a write route answers 403).

An entry is either the key itself or ``sha256:<64 hex>``, the SHA-256 of the key, so that a
deployment need store only hashes. Keys are kept only as digests; a presented key is hashed
and compared with :func:`hmac.compare_digest` against every configured digest (no early
exit). With no key configured at all the API is open and says so at start-up.
A request with a body has its key checked from its headers before any of the body is read
(:func:`refusal`, called by :class:`service.middleware.BodyGate`); the route's dependencies
check it again, and alone for requests without a body.
``/healthz``, ``/readyz``, ``/metrics``, ``/docs``, ``/redoc``, ``/openapi.json`` and the dashboard's
page ``/ui`` (static files; its data comes from the keyed routes) are always open.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from typing import TYPE_CHECKING, Annotated, Literal
from urllib.parse import urlsplit

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param

if TYPE_CHECKING:
    from service.config import Settings

Role = Literal["read", "write"]

_HEX = re.compile(r"^[0-9a-fA-F]{64}$")


class KeyConfigError(ValueError):
    """A configured key entry is malformed (e.g. ``sha256:`` without 64 hex digits)."""


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def parse_keys(text: str | None, variable: str) -> list[bytes]:
    """Comma-separated entries -> SHA-256 digests. Blank entries are ignored."""
    digests = []
    for entry in (text or "").split(","):
        entry = entry.strip()
        if not entry:
            continue
        if entry.lower().startswith("sha256:"):
            hexpart = entry[len("sha256:") :]
            if not _HEX.match(hexpart):
                raise KeyConfigError(f"{variable}: an entry 'sha256:...' needs 64 hex digits")
            digests.append(bytes.fromhex(hexpart))
        else:
            digests.append(_digest(entry))
    return digests


class KeyRing:
    def __init__(self, write_keys: str | None, read_keys: str | None):
        self.write = parse_keys(write_keys, "API_WRITE_KEYS")
        self.read = parse_keys(read_keys, "API_READ_KEYS")

    @property
    def enabled(self) -> bool:
        return bool(self.write or self.read)

    def role(self, key: str | None) -> Role | None:
        if not key:
            return None
        presented = _digest(key)
        is_write = is_read = False
        for d in self.write:  # every comparison runs: the time does not depend on which matched
            is_write |= hmac.compare_digest(presented, d)
        for d in self.read:
            is_read |= hmac.compare_digest(presented, d)
        return "write" if is_write else "read" if is_read else None


bearer = HTTPBearer(auto_error=False, description="An API key: a write key (posting data) or a read key.")

UNAUTHORIZED = {"description": "Missing or unknown API key (`Authorization: Bearer <key>`)."}
FORBIDDEN = {"description": "A read key on a route that changes the model."}


MISSING_KEY = "missing API key: send `Authorization: Bearer <key>`"
UNKNOWN_KEY = "unknown API key"
READ_ONLY_KEY = "this key may only read: posting data needs a write key"


def _unauthorized(message: str) -> HTTPException:
    return HTTPException(401, message, headers={"WWW-Authenticate": "Bearer"})


def _role(request: Request, credentials: HTTPAuthorizationCredentials | None) -> Role | None:
    keys: KeyRing = request.app.state.keys
    if not keys.enabled:
        return "write"
    if credentials is None:
        raise _unauthorized(MISSING_KEY)
    role = keys.role(credentials.credentials)
    if role is None:
        raise _unauthorized(UNKNOWN_KEY)
    return role


def refusal(keys: KeyRing, authorization: str | None, needed: Role) -> HTTPException | None:
    """The 401 or 403 that a request with this ``Authorization`` header gets on a route that
    needs a ``needed`` key, or ``None`` when the key may pass: the same answer as the routes'
    dependencies, decided from the header alone (before any of the body is read)."""
    if not keys.enabled:
        return None
    scheme, token = get_authorization_scheme_param(authorization)
    if not (authorization and scheme and token) or scheme.lower() != "bearer":  # as HTTPBearer reads it
        return _unauthorized(MISSING_KEY)
    role = keys.role(token)
    if role is None:
        return _unauthorized(UNKNOWN_KEY)
    if needed == "write" and role != "write":
        return HTTPException(403, READ_ONLY_KEY)
    return None


def check_key(request: Request, needed: Role) -> None:
    """Raise the 401 or 403 of :func:`refusal` for the request's ``Authorization`` header
    (nothing when the API is open): what :func:`require_read` and :func:`require_write` answer,
    for a plain Starlette route (no dependency to solve)."""
    keys: KeyRing = request.app.state.keys
    if keys.enabled:
        refused = refusal(keys, request.headers.get("authorization"), needed)
        if refused is not None:
            raise refused


def presented_role(request: Request) -> Role | None:
    """The role of the key ``request`` presents, ``None`` for none or an unknown one (never a
    401): for an open route that tells a keyed caller more (``/readyz``). With no key configured
    the API is open and every caller is a writer."""
    keys: KeyRing = request.app.state.keys
    if not keys.enabled:
        return "write"
    scheme, token = get_authorization_scheme_param(request.headers.get("Authorization"))
    return keys.role(token) if scheme.lower() == "bearer" else None


async def require_read(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
) -> None:
    _role(request, credentials)


async def require_write(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
) -> None:
    if _role(request, credentials) != "write":
        raise HTTPException(403, READ_ONLY_KEY)


# ----------------------------------------------------------------------------- redaction
class Redactor:
    """Replaces known secrets (API keys, passwords in connection URLs, whole URLs) by ``***``."""

    def __init__(self, secrets: list[str] | None = None):
        self.secrets = sorted({s for s in (secrets or []) if s and len(s) >= 3}, key=len, reverse=True)

    @classmethod
    def from_settings(cls, settings: Settings) -> Redactor:
        secrets: list[str] = []
        for text in (settings.API_WRITE_KEYS, settings.API_READ_KEYS):
            secrets += [e.strip() for e in (text or "").split(",") if e.strip()]
        for url in (settings.DATABASE_URL, settings.REDIS_URL):
            if not url:
                continue
            secrets.append(url)
            try:
                parts = urlsplit(url)
                if parts.password:
                    secrets.append(parts.password)
                    from urllib.parse import unquote

                    secrets.append(unquote(parts.password))
            except ValueError:
                pass
        return cls(secrets)

    def __call__(self, text: str) -> str:
        for s in self.secrets:
            if s in text:
                text = text.replace(s, "***")
        return text
