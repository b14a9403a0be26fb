"""Which host of one service takes each request (:class:`Hosts`), for the transports of
:mod:`fcl3.hosts` (``Spread``, ``AsyncSpread``): shared by both, thread-safe, no I/O."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

import httpx


class Hosts:
    """Which host takes each request: of the hosts that are up, the one with the fewest requests
    outstanding, in turn among equals (round robin); the hosts left out after them. What each host
    answered. Shared by :class:`fcl3.hosts.Spread` and :class:`fcl3.hosts.AsyncSpread` (thread-safe; does no I/O)."""

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
            return {str(u): n for u, n in zip(self.urls, self._served, strict=True)}

    @property
    def errors(self) -> dict[str, int]:
        """Transport errors raised by each host (connection refused, dropped, timed out), by URL."""
        with self._lock:
            return {str(u): n for u, n in zip(self.urls, self._errors, strict=True)}

    @property
    def failovers(self) -> int:
        """Requests sent to another host because theirs could not be reached."""
        with self._lock:
            return self._failovers

    @property
    def outstanding(self) -> dict[str, int]:
        """Requests sent to each host and not yet answered, by URL."""
        with self._lock:
            return {str(u): n for u, n in zip(self.urls, self._outstanding, strict=True)}

    def down(self) -> list[str]:
        """The hosts left out right now."""
        with self._lock:
            now = time.monotonic()
            return [str(u) for u, t in zip(self.urls, self._down_until, strict=True) if t > now]


def _origin(url: str | httpx.URL) -> httpx.URL:
    u = httpx.URL(url)
    if u.scheme not in ("http", "https") or not u.host:
        raise ValueError(f"a host is an http(s) URL with a host name, not {str(url)!r}")
    if u.path not in ("", "/") or u.query or u.fragment:
        raise ValueError(f"a host is an origin (scheme://host:port), not {str(url)!r}: the path is the request's")
    return httpx.URL(scheme=u.scheme, host=u.host, port=u.port)
