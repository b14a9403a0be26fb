"""What uvicorn serves the app with: its HTTP/1.1 protocol, with a header read timeout.

uvicorn times out an idle keep-alive connection (``--timeout-keep-alive``) but not a request
whose headers never end: a client that connects and sends nothing, or a header a byte at a
time, holds its connection for ever ("slowloris"). :class:`HttpProtocol` is uvicorn's own
protocol (httptools when installed, else h11, as ``--http auto`` picks) with the timeout other
servers have (nginx ``client_header_timeout``, Apache ``RequestReadTimeout``, Go
``ReadHeaderTimeout``): a connection that has not sent a request's whole headers
``HEADER_TIMEOUT`` seconds after it opened, or after the first byte of its next request, is
closed (with 408 if it sent part of them). Headers larger than ``MAX_HEADER_BYTES`` (uvicorn's
``--h11-max-incomplete-event-size`` when given) get 431 and the connection is closed: h11
stops at 16 KiB by itself, httptools would keep every byte until the deadline. The body's own
idle timeout (``BODY_TIMEOUT``, 408) is :class:`service.middleware.BodyGate`'s.

``fcl3 serve`` and the Docker image run with it; by hand::

    uvicorn service.main:app --http service.server:HttpProtocol
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from uvicorn.config import Config

from service.config import get_settings

if TYPE_CHECKING:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _Base
else:
    try:
        import httptools  # noqa: F401 - the protocol uvicorn's "auto" picks when it is installed
    except ImportError:  # pragma: no cover
        from uvicorn.protocols.http.h11_impl import H11Protocol as _Base
    else:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _Base

#: What ``uvicorn --http`` takes to run with :class:`HttpProtocol`.
HTTP_PROTOCOL = "service.server:HttpProtocol"

#: The most bytes of a request's line and headers (a long GET /predict query included).
MAX_HEADER_BYTES = 64 * 1024


def _closing(status: bytes, message: bytes) -> bytes:
    return (
        b"HTTP/1.1 %s\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
        b"connection: close\r\n\r\n%s" % (status, len(message), message)
    )


_TIMED_OUT = _closing(b"408 Request Timeout", b"request headers not received in time (HEADER_TIMEOUT)")
_TOO_LARGE = _closing(b"431 Request Header Fields Too Large", b"request line and headers too large")


class HttpProtocol(_Base):
    """uvicorn's HTTP/1.1 protocol, which closes a connection whose request headers are not
    complete ``HEADER_TIMEOUT`` seconds after the connection opened or the request began, or
    are larger than ``max_header_bytes``."""

    def __init__(self, config: Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self.header_timeout = get_settings().HEADER_TIMEOUT
        self.max_header_bytes = config.h11_max_incomplete_event_size or MAX_HEADER_BYTES
        self._header_timer: asyncio.TimerHandle | None = None
        self._waiting_cycle: Any = None  # the cycle that was current when the timer was armed
        self._header_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._header_timer is None and self._between_requests():
            self._arm()  # the first byte of the next request on a kept-alive connection
        if self._header_timer is not None:
            self._header_bytes += len(data)
        super().data_received(data)
        if self._header_timer is not None:
            if self.cycle is not self._waiting_cycle:
                self._disarm()  # the headers are complete: the request has its cycle
            elif self._header_bytes > self.max_header_bytes and not self.transport.is_closing():
                self._disarm()
                self.transport.write(_TOO_LARGE)
                self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _between_requests(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm(self) -> None:
        self._waiting_cycle, self._header_bytes = self.cycle, 0
        self._header_timer = self.loop.call_later(self.header_timeout, self._timed_out)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _timed_out(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self.cycle is not self._waiting_cycle:
            return
        if self._header_bytes:  # part of a request: say why; an idle connection is just closed
            self.transport.write(_TIMED_OUT)
        self.transport.close()
