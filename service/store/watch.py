"""Version watch: how a process learns that a stored model may have changed, without a
database round trip per prediction.

A :class:`service.store.reads.ModelReader` serves its cached learner without asking the database
while the watch's :meth:`token` for the model is the one it read before its last
``SELECT version``, and for at most ``poll`` seconds after that check (the fallback poll, in
case a notification is lost). Any other token (or ``None``: the watch cannot tell) makes the
next request run the ``SELECT version`` again, as every request did before.

* The embedded SQLite default (:class:`SqliteWatch`): ``PRAGMA data_version`` on a dedicated
  connection of the process; it changes whenever another connection (of this process or any
  other) commits to the file. An in-process call with no disk I/O, checked on every request:
  a commit is seen by the next request of every process, with no staleness.
* PostgreSQL (:class:`PostgresWatch`): every write transaction runs
  ``pg_notify('fcl3_models', <model name>)`` (:func:`notify`), delivered at its commit; a
  background thread per process ``LISTEN``s on a dedicated connection and counts the
  notifications per model. A prediction may be stale by the notification delay (a
  round trip: milliseconds), and by at most ``poll`` seconds if a notification is lost.
  While the listener is not connected (start-up, a database restart), the token is ``None``:
  every request checks the version, as before.

A watch offers :meth:`subscribe`: a callback called with a model's name whenever the watch
learns that the model changed (on PostgreSQL, from the notifications it already receives),
and with ``None`` when the watch closes. The app subscribes its event hub
(:class:`service.events.hub.Hub`), so the watch never imports a feature.

``min_version`` (the version a write returned) makes a prediction refresh first when the
cached version is lower: see :meth:`service.store.reads.ModelReader.snapshot`.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections import defaultdict
from collections.abc import Callable, Hashable

from sqlalchemy import Connection, Engine, text

from service.db import sqlite_file

#: A subscriber: called with a model's name (it may have changed), or None (the watch closed).
Subscriber = Callable[[str | None], None]


class _Subscribers:
    def __init__(self) -> None:
        self._callbacks: list[Subscriber] = []

    def subscribe(self, callback: Subscriber) -> None:
        """Call ``callback(name)`` whenever the watch learns that the model ``name`` changed,
        and ``callback(None)`` when it closes."""
        self._callbacks.append(callback)

    def _changed(self, name: str | None) -> None:
        for callback in list(self._callbacks):
            callback(name)


log = logging.getLogger("service.watch")

#: The PostgreSQL notification channel; the payload is the model name.
CHANNEL = "fcl3_models"


def notify(conn: Connection, name: str) -> None:
    """In a write transaction on ``conn``: tell the other processes (at commit) that the model
    ``name`` changed. Nothing on SQLite (``PRAGMA data_version`` sees every commit)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_notify(:c, :n)"), {"c": CHANNEL, "n": name})


class NoWatch(_Subscribers):
    """No watch: every request checks the stored version (the token is always ``None``)."""

    poll = 0.0
    exact = False

    def token(self, name: str) -> Hashable | None:
        return None

    def close(self) -> None:
        self._changed(None)


class SqliteWatch(_Subscribers):
    """``PRAGMA data_version`` of a dedicated connection to the SQLite file ``path``.

    Exact: the token changes with every commit to the file, by any connection, and nothing
    can be missed, so an unchanged token proves that nothing was committed since it was read
    (writers rely on it: :meth:`service.store.reads.ModelReader.snapshot`)."""

    exact = True

    def __init__(self, path: str, poll: float = 1.0):
        super().__init__()
        self.poll = poll
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self._cursor = self._conn.cursor()  # one cursor for every look (under the lock)
        self._lock = threading.Lock()

    def token(self, name: str) -> Hashable | None:
        try:
            with self._lock:
                version: int = self._cursor.execute("PRAGMA data_version").fetchone()[0]
                return version
        except sqlite3.Error:
            return None

    def close(self) -> None:
        self._changed(None)
        with self._lock:
            self._conn.close()


class PostgresWatch(_Subscribers):
    """A thread ``LISTEN``ing on :data:`CHANNEL`; the token of a model is (connection epoch,
    notifications received for it). ``None`` while not listening. Not exact: a notification
    arrives after its commit."""

    exact = False

    def __init__(self, dsn: str, poll: float = 1.0, connect_timeout: int = 3):
        super().__init__()
        self.poll = poll
        self._dsn, self._timeout = dsn, connect_timeout
        self._counts: defaultdict[str, int] = defaultdict(int)
        self._epoch = 0
        self._listening = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fcl3-version-watch", daemon=True)
        self._thread.start()

    @property
    def listening(self) -> bool:
        return self._listening

    def token(self, name: str) -> Hashable | None:
        if not self._listening:
            return None
        return (self._epoch, self._counts.get(name, 0))

    def _run(self) -> None:
        import psycopg

        while not self._stop.is_set():
            conn = None
            try:
                conn = psycopg.connect(self._dsn, autocommit=True, connect_timeout=self._timeout)
                conn.execute(f"LISTEN {CHANNEL}")
                self._epoch += 1  # notifications may have been missed before this LISTEN
                self._listening = True
                while not self._stop.is_set():
                    for n in conn.notifies(timeout=0.5):
                        self._counts[n.payload] += 1
                        self._changed(n.payload)
            except Exception as exc:  # noqa: BLE001 - reconnect; meanwhile every request checks
                if self._listening:
                    log.warning("version watch lost its connection (%s); reconnecting", type(exc).__name__)
            finally:
                self._listening = False
                if conn is not None:
                    try:
                        conn.close()
                    except Exception:  # noqa: BLE001
                        pass
            self._stop.wait(0.5)

    def close(self) -> None:
        self._changed(None)
        self._stop.set()
        self._thread.join(timeout=5)


def make_watch(engine: Engine, poll: float = 1.0, connect_timeout: int = 3) -> NoWatch | SqliteWatch | PostgresWatch:
    """The watch for ``engine``'s database; :class:`NoWatch` when ``poll`` is 0 or the database
    cannot be watched (an in-memory SQLite database, another dialect)."""
    if poll <= 0:
        return NoWatch()
    if engine.dialect.name == "sqlite":
        path = sqlite_file(engine.url.render_as_string(hide_password=False))
        return SqliteWatch(str(path), poll) if path is not None else NoWatch()
    if engine.dialect.name == "postgresql" and engine.dialect.driver == "psycopg":
        dsn = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        return PostgresWatch(dsn, poll, connect_timeout)
    return NoWatch()


#: A version watch, of whichever kind the database allows (:func:`make_watch`).
Watch = NoWatch | SqliteWatch | PostgresWatch
