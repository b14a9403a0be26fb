"""Spread a client's requests over the hosts of one FCL3 service (replicas with no load balancer
in front), failing over from a host that cannot be reached::

    import fcl3
    from fcl3.hosts import Spread

    hosts = ["http://10.0.0.11:8000", "http://10.0.0.12:8000", "http://10.0.0.13:8000"]
    with fcl3.Client(hosts[0], transport=Spread(hosts)) as c:   # AsyncClient: AsyncSpread
        c.learn("schools", "school-1", X, y)

Every replica answers for every model from the shared PostgreSQL and Redis, so any host can take
any request. :class:`Spread` (and :class:`AsyncSpread`, the same for ``AsyncClient`` or an
``httpx.AsyncClient``) is an httpx transport:

* each request goes to the host that is up with the fewest requests outstanding, the next in
  turn among equals (round robin while requests do not overlap); a host that hangs keeps its
  requests outstanding until they time out, so the others take the next ones. The request's
  scheme, host and port are the host's, its path and query its own (the client's URL names the
  first host; hosts are origins, ``scheme://host:port``);
* a request that could not be sent (connection refused, connect or pool timeout: nothing reached
  the host) goes to the next host at once, and the host is left out for ``cooldown`` seconds;
  when every host is out, each is tried again in turn;
* an error after the request was sent (the host died while answering, or did not answer within
  the client's timeout) also leaves the host out, but is raised: the request may have been
  applied, and whether resending is safe is the client's call (:mod:`fcl3.retries`: reads are
  resent, and batches, whose ``Idempotency-Key`` makes a resend apply nothing twice;
  ``predict(remember=True)`` is not). The resend goes to another host.

:attr:`Spread.served` counts the answers of each host, :attr:`Spread.failovers` the requests
moved to another host. With ``trust_env=True`` (httpx's default) and a proxy in the environment
(``HTTP_PROXY``, ...), httpx sends the matching requests to the proxy, not through this
transport: pass ``trust_env=False`` (or name the hosts in ``NO_PROXY``).
"""
from __future__ import annotations

import threading
import time
from typing import Any, Iterable

import httpx

from .errors import NOT_SENT

__all__ = ["Spread", "AsyncSpread", "Hosts"]

class Hosts:
    """Which host takes each request: of the hosts that are up, the one with the fewest requests
    outstanding, in turn among equals (round robin); the hosts left out after them. What each host
    answered. Shared by :class:`Spread` and :class:`AsyncSpread` (thread-safe; does no I/O)."""

    def __init__(self, urls: Iterable[str | httpx.URL], cooldown: float = 2.0):
        self.urls = tuple(_origin(u) for u in urls)
        if not self.urls:
            raise ValueError("Spread needs at least one host URL")
        if cooldown < 0:
            raise ValueError(f"cooldown must be >= 0 seconds, not {cooldown}")
        self.cooldown = cooldown
        self._lock = threading.Lock()
        self._next = 0
        self._down_until = [0.0] * len(self.urls)
        self._outstanding = [0] * len(self.urls)
        self._served = [0] * len(self.urls)
        self._errors = [0] * len(self.urls)
        self._failovers = 0

    def order(self) -> list[int]:
        """The hosts (indices) to try for one request, in order: of the hosts that are up, the one
        with the fewest requests outstanding (the first in turn among equals), then the other
        hosts that are up in turn, then the hosts left out, longest out first. A host that hangs
        (its link cut, its process stopped) keeps its requests outstanding until they time out,
        so the next requests go to the others."""
        n = len(self.urls)
        with self._lock:
            now = time.monotonic()
            ring = [(self._next + k) % n for k in range(n)]
            up = [i for i in ring if self._down_until[i] <= now]
            out = sorted((i for i in ring if self._down_until[i] > now), key=self._down_until.__getitem__)
            if up:
                first = min(up, key=self._outstanding.__getitem__)  # min() keeps the first of equals
                up.remove(first)
                up.insert(0, first)
            self._next = ((up or out)[0] + 1) % n
        return up + out

    def route(self, request: httpx.Request, i: int) -> None:
        """Address ``request`` to host ``i`` (scheme, host, port and ``Host`` header), counted
        outstanding until :meth:`answered` or :meth:`failed`."""
        host = self.urls[i]
        request.url = request.url.copy_with(scheme=host.scheme, host=host.host, port=host.port)
        request.headers["Host"] = host.netloc.decode("ascii")
        with self._lock:
            self._outstanding[i] += 1

    def answered(self, i: int) -> None:
        with self._lock:
            self._outstanding[i] -= 1
            self._served[i] += 1

    def failed(self, i: int, exc: Exception) -> None:
        """Host ``i`` raised ``exc`` (a transport error: refused, dropped, timed out): count it and
        leave the host out for ``cooldown`` seconds."""
        with self._lock:
            self._outstanding[i] -= 1
            self._errors[i] += 1
            self._down_until[i] = time.monotonic() + self.cooldown

    def abandoned(self, i: int) -> None:
        """The request sent to host ``i`` ended otherwise (cancelled, interrupted): no longer outstanding."""
        with self._lock:
            self._outstanding[i] -= 1

    def moved(self, i: int) -> None:
        """A request that could not reach its host goes to host ``i``: the turn after it is the next host's."""
        with self._lock:
            self._failovers += 1
            self._next = (i + 1) % len(self.urls)

    @property
    def served(self) -> dict[str, int]:
        """Answers received from each host (any status), by URL."""
        with self._lock:
            return {str(u): n for u, n in zip(self.urls, self._served)}

    @property
    def errors(self) -> dict[str, int]:
        """Transport errors raised by each host (connection refused, dropped, timed out), by URL."""
        with self._lock:
            return {str(u): n for u, n in zip(self.urls, self._errors)}

    @property
    def failovers(self) -> int:
        """Requests sent to another host because theirs could not be reached."""
        with self._lock:
            return self._failovers

    @property
    def outstanding(self) -> dict[str, int]:
        """Requests sent to each host and not yet answered, by URL."""
        with self._lock:
            return {str(u): n for u, n in zip(self.urls, self._outstanding)}

    def down(self) -> list[str]:
        """The hosts left out right now."""
        with self._lock:
            now = time.monotonic()
            return [str(u) for u, t in zip(self.urls, self._down_until) if t > now]


def _origin(url: str | httpx.URL) -> httpx.URL:
    u = httpx.URL(url)
    if u.scheme not in ("http", "https") or not u.host:
        raise ValueError(f"a host is an http(s) URL with a host name, not {str(url)!r}")
    if u.path not in ("", "/") or u.query or u.fragment:
        raise ValueError(f"a host is an origin (scheme://host:port), not {str(url)!r}: the path is the request's")
    return httpx.URL(scheme=u.scheme, host=u.host, port=u.port)


class _Spreading:
    """What :class:`Spread` and :class:`AsyncSpread` share: the hosts and one httpx transport
    (one connection pool) per host."""

    _transport_class: type

    def __init__(self, urls: Iterable[str | httpx.URL], *, cooldown: float = 2.0, **transport_options: Any):
        self.hosts = Hosts(urls, cooldown)
        self._transports = [self._transport_class(**transport_options) for _ in self.hosts.urls]

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


class Spread(_Spreading, httpx.BaseTransport):
    """An httpx transport over several hosts of one service (see the module's docstring).

    ``urls``: the hosts' origins; ``cooldown``: seconds a host that could not be reached is
    left out; ``transport_options``: passed to each host's :class:`httpx.HTTPTransport`
    (``verify``, ``limits``, ``http2``, ...; one connection pool per host)."""

    _transport_class = httpx.HTTPTransport

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
        raise error  # every host refused

    def close(self) -> None:
        for t in self._transports:
            t.close()


class AsyncSpread(_Spreading, httpx.AsyncBaseTransport):
    """:class:`Spread` for ``AsyncClient`` (and ``httpx.AsyncClient``)."""

    _transport_class = httpx.AsyncHTTPTransport

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        error: Exception | None = None
        for i in self.hosts.order():
            if error is not None:
                self.hosts.moved(i)
            self.hosts.route(request, i)
            try:
                response = await self._transports[i].handle_async_request(request)
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
        raise error  # every host refused

    async def aclose(self) -> None:
        for t in self._transports:
            await t.aclose()
