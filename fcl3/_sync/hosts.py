# Generated from fcl3/_async/hosts.py by `python -m fcl3._unasync`: do not edit.
# Change the async source and run the script again (tests/client/test_unasync.py checks it).
"""The httpx transport over several hosts of one service (:mod:`fcl3.hosts` says what it does),
written once in ``fcl3/_async``: ``python -m fcl3._unasync`` writes its sync twin into ``fcl3/_sync``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import httpx

from fcl3._routing import Hosts
from fcl3.errors import NOT_SENT


class Spread(httpx.BaseTransport):
    """An httpx transport over several hosts of one service (see :mod:`fcl3.hosts`).

    ``urls``: the hosts' origins; ``cooldown``: seconds a host that could not be reached is
    left out; ``transport_options``: passed to each host's httpx transport (``verify``,
    ``limits``, ``http2``, ...; one connection pool per host)."""

    def __init__(self, urls: Iterable[str | httpx.URL], *, cooldown: float = 2.0, **transport_options: Any):
        self.hosts = Hosts(urls, cooldown)
        self._transports = [httpx.HTTPTransport(**transport_options) for _ in self.hosts.urls]

    @property
    def url(self) -> str:
        """The first host's URL (the client's ``url``)."""
        return str(self.hosts.urls[0])

    @property
    def served(self) -> dict[str, int]:
        return self.hosts.served

    @property
    def failovers(self) -> int:
        return self.hosts.failovers

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        error: Exception | None = None
        for i in self.hosts.order():
            if error is not None:
                self.hosts.moved(i)
            self.hosts.route(request, i)
            try:
                response = self._transports[i].handle_request(request)
            except httpx.TransportError as exc:
                self.hosts.failed(i, exc)
                if not isinstance(exc, NOT_SENT):
                    raise
                error = exc
                continue
            except BaseException:  # cancelled (asyncio), interrupted
                self.hosts.abandoned(i)
                raise
            self.hosts.answered(i)
            return response
        assert error is not None  # every host refused
        raise error

    def close(self) -> None:
        for t in self._transports:
            t.close()
