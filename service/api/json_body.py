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

from fastapi import Request, Response
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


class JsonRoute(APIRoute):
    """An ``APIRoute`` whose endpoint gets a :class:`JsonRequest`."""

    def get_route_handler(self) -> Callable[..., Any]:
        handler = super().get_route_handler()

        async def json_route_handler(request: Request) -> Response:
            return await handler(JsonRequest(request.scope, request.receive))

        return json_route_handler
