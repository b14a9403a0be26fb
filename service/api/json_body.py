"""JSON request bodies parsed by pydantic-core's parser instead of the standard library's.

FastAPI reads a JSON body with ``await request.json()`` (Starlette: :func:`json.loads`) before
pydantic validates it; for a batch of numbers that parse is the dearest step of reading the
request (School's 55 x 28 batch: about 490 us with :func:`json.loads`, 60 us with
:func:`pydantic_core.from_json`). :class:`JsonRoute` is FastAPI's documented extension point
for that (a custom ``APIRoute`` whose handler gets a custom ``Request``), set on the routers
whose endpoints take a JSON body (a batch, evaluation rows, labels, a new model). A body that
``from_json`` refuses is parsed again by :func:`json.loads`, so the result, and every error
(FastAPI's 422 ``json_invalid`` with the position), is what :func:`json.loads` gives:
``from_json`` refuses what the standard library reads beyond strict UTF-8 JSON (a byte-order
mark, UTF-16, a lone surrogate escape).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute
from pydantic_core import from_json


class JsonRequest(Request):
    """A request whose :meth:`json` parses with ``from_json`` (:mod:`service.api.json_body`)."""

    async def json(self) -> Any:
        if not hasattr(self, "_parsed_body"):  # parsed once per request, as Starlette's json()
            body = await self.body()
            try:
                self._parsed_body = from_json(body)
            except ValueError:
                self._parsed_body = json.loads(body)  # what json reads that from_json does not, or its error
        return self._parsed_body


def media_type(content_type: str | None) -> str:
    """The media type of a ``Content-Type`` header, lower case, without its parameters."""
    return (content_type or "").partition(";")[0].strip().lower()


def is_json(media: str) -> bool:
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def unsupported(content_type: str | None, csv: bool) -> HTTPException | None:
    """The 415 of a body whose media type the route does not read (``csv``: it reads
    ``text/csv`` too); None when it does. A body without a ``Content-Type`` is refused too:
    it is what a web page may send to another site without the browser asking that site first
    (FastAPI's strict content type), so reading it as JSON would let any page write to a
    server on ``localhost`` that has no keys."""
    media = media_type(content_type)
    takes = "application/json or text/csv" if csv else "application/json"
    if not media:
        return HTTPException(
            415,
            f"a body without a Content-Type is not read: send {takes} "
            "(curl: -H 'content-type: application/json', or --json instead of -d)",
        )
    if is_json(media) or (csv and media == "text/csv"):
        return None
    return HTTPException(
        415,
        f"a body of Content-Type {media!r} is not read here: send {takes} "
        "(curl: -H 'content-type: application/json', or --json instead of -d)",
    )


class JsonRoute(APIRoute):
    """An ``APIRoute`` whose endpoint gets a :class:`JsonRequest`, and whose body of another
    media type than JSON (or CSV, where the route documents ``text/csv``) gets 415."""

    def get_route_handler(self) -> Callable[..., Any]:
        handler = super().get_route_handler()
        content = ((self.openapi_extra or {}).get("requestBody") or {}).get("content") or {}
        csv = "text/csv" in content

        async def json_route_handler(request: Request) -> Response:
            if request.headers.get("content-length", "0") != "0" or "transfer-encoding" in request.headers:
                refused = unsupported(request.headers.get("content-type"), csv)
                if refused is not None:
                    raise refused
            return await handler(JsonRequest(request.scope, request.receive))

        return json_route_handler
