"""Engines (sync SQLAlchemy 2.x) and the schema's migrations (Alembic, from the installed
package ``fcl3_migrations``); ``python -m service.db upgrade`` runs them on DATABASE_URL."""

from __future__ import annotations

import importlib.util
import logging
import os
import select
import sqlite3
import sys
import threading
import urllib.parse
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic_core import from_json, to_json
from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url

from service.config import Settings

if TYPE_CHECKING:
    from alembic.config import Config

log = logging.getLogger("service.db")

#: The repository's migrations folder (a checkout whose install predates fcl3_migrations).
CHECKOUT_MIGRATIONS = Path(__file__).resolve().parents[1] / "migrations"


def migrations_dir() -> Path:
    """The Alembic scripts: the installed package ``fcl3_migrations`` (the repository's
    ``migrations/`` folder, installed under that name), else a checkout's ``migrations/``."""
    spec = importlib.util.find_spec("fcl3_migrations")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    if (CHECKOUT_MIGRATIONS / "env.py").exists():
        return CHECKOUT_MIGRATIONS
    raise RuntimeError("the service's migrations are not installed (package fcl3_migrations): reinstall fcl3")


def sqlite_file(url: str) -> Path | None:
    """The database file of an SQLite URL (``None``: not SQLite, or in memory)."""
    if not url.startswith("sqlite"):
        return None
    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database).resolve()


def json_text(value: Any) -> str:
    """A JSON column's value as text, by pydantic-core's encoder (the engines' serializer;
    read back by its ``from_json``): a few times faster than the standard library's, SQLAlchemy's
    default, on an update's meta and scores. Non-finite floats are written ``NaN`` and
    ``Infinity``, as the standard library writes them; every float reads back equal."""
    return to_json(value, inf_nan_mode="constants").decode()


def make_engine(settings: Settings, pool_size: int | None = None) -> Engine:
    """The engine of ``settings``; ``pool_size`` overrides ``DB_POOL_SIZE`` (as many again may overflow).

    On an SQLite file, the file is guarded (:class:`StoreFile`): once it is deleted or replaced
    under the running process, every use of the engine fails (503). Elsewhere, every pooled
    connection is checked before use (``pool_pre_ping``, see :func:`_quiet_socket_ping`)."""
    url = settings.database_url
    if url.startswith("sqlite"):
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30},
            json_serializer=json_text,
            json_deserializer=from_json,
        )
        guard = StoreFile.of(engine)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:  # WAL: readers never block the writer
            if guard is not None:
                guard.opened()  # before anything is written to the file
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=FULL")
            cur.close()

        if guard is not None:
            guard.install(engine)
        return engine
    connect_args = {}
    if url.startswith("postgresql"):
        connect_args["connect_timeout"] = settings.DB_CONNECT_TIMEOUT
    # Every pooled connection is checked before use: after a database restart, the pool holds
    # connections whose server is gone, and without the check each of them fails one request
    # (503) before SQLAlchemy notices. The check costs no round trip while the connection's
    # socket is quiet (_quiet_socket_ping).
    # The pool is as large as the request concurrency one process sees: a smaller pool makes
    # threads open and close overflow connections on every request.
    size = pool_size or settings.DB_POOL_SIZE
    engine = create_engine(
        url,
        pool_pre_ping=True,
        pool_size=size,
        max_overflow=size,
        connect_args=connect_args,
        json_serializer=json_text,
        json_deserializer=from_json,
    )
    _quiet_socket_ping(engine)
    return engine


def _quiet_socket_ping(engine: Engine) -> None:
    """Make ``engine``'s pre-ping free while a pooled connection's socket is quiet.

    An idle connection in the pool receives nothing from its server, except when the server
    goes away: PostgreSQL sends a FATAL message to every client as it shuts down (``fast``,
    ``immediate``, a terminated backend) and the socket closes; the socket is then readable.
    So the check polls the socket without waiting: quiet and the connection idle, it is
    used as is; anything to read (or a driver without ``fileno()``) runs the dialect's own
    ping, a ``SELECT 1``, which fails on a dead connection, and the pool replaces it. A server
    that vanished without a word (a host lost) is found by the query itself, as a ``SELECT 1``
    would be: a timeout, a 503, and the pool invalidated."""
    full_ping = engine.dialect.do_ping

    def do_ping(dbapi_conn: Any) -> bool:
        if _socket_quiet(dbapi_conn):
            return True
        return full_ping(dbapi_conn)

    engine.dialect.do_ping = do_ping  # type: ignore[method-assign,assignment]  # this engine's own dialect instance


def _socket_quiet(dbapi_conn: Any) -> bool:
    """Whether the connection is open, idle, and has nothing waiting on its socket."""
    try:
        if getattr(dbapi_conn, "closed", True):
            return False
        info = getattr(dbapi_conn, "info", None)  # psycopg 3: the transaction status
        if info is not None and getattr(info, "transaction_status", 0) != 0:  # 0: IDLE
            return False
        fd = dbapi_conn.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLPRI)
        return not poller.poll(0)
    except Exception:  # noqa: BLE001 - whatever cannot be told this way is pinged
        return False


class StoreFile:
    """The identity of an SQLite engine's file: ``(st_dev, st_ino)`` at its first connection.

    A file deleted under a running process stays readable and writable by the connections
    that have it open, but nothing written there survives the process: the next start finds
    no file, or another one. So once the path no longer leads to the file first opened (it
    was deleted, or replaced by another file, a copy of itself included), the engine refuses
    every connection from the pool, opens none (nothing is created at the path) and refuses
    every commit: each answers 503 naming the file, and ``/readyz`` is not ready, until the
    process is restarted on the file now in place. The check is one ``stat`` of the path."""

    _of: weakref.WeakKeyDictionary[Engine, StoreFile] = weakref.WeakKeyDictionary()

    def __init__(self, path: Path):
        self.path = path
        self.identity: tuple[int, int] | None = None
        self._lock = threading.Lock()

    @classmethod
    def of(cls, engine: Engine) -> StoreFile | None:
        """The guard of ``engine`` (made on the first call); None: not an SQLite file."""
        guard = cls._of.get(engine)
        if guard is None and engine.dialect.name == "sqlite":
            path = sqlite_file(engine.url.render_as_string(hide_password=False))
            if path is not None:
                guard = cls._of.setdefault(engine, cls(path))
        return guard

    def problem(self) -> str | None:
        """Why the file cannot be used any more; None while the path leads to the file opened."""
        if self.identity is None:
            return None
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            what = "deleted"
        except OSError as exc:
            what = f"unreachable ({exc.strerror})"
        else:
            if (st.st_dev, st.st_ino) == self.identity:
                return None
            what = "replaced by another file"
        return (
            f"database file deleted or replaced under the running service: {self.path} was {what}; "
            "nothing is written any more (what this process wrote since is not in the file at that path): "
            "restart the service once the right file is in place"
        )

    def check(self) -> None:
        """Raise ``sqlite3.OperationalError`` (answered 503) if the file is gone."""
        why = self.problem()
        if why is not None:
            raise sqlite3.OperationalError(why)

    def _take_identity(self) -> bool:
        """Take the file's identity if none is taken yet and the file exists; whether it was
        taken now."""
        with self._lock:
            if self.identity is not None:
                return False
            try:
                st = os.stat(self.path)
            except OSError:
                return False  # not there (yet): the next connection takes the identity
            self.identity = (st.st_dev, st.st_ino)
            return True

    def opened(self) -> None:
        """At each new connection: take the file's identity (the first), else check it."""
        if self.identity is None:
            self._take_identity()
            return
        self.check()

    def install(self, engine: Engine) -> None:
        """Take the identity of the file there now (a process that has not connected yet, such
        as a second worker whose requests all went to the first, must not create a new file
        at the path once it is deleted), then check the file before each new connection is
        opened, each pooled connection is used, and each commit."""
        self._take_identity()

        @event.listens_for(engine, "do_connect")
        def _open_existing(_dialect: Any, _record: Any, cargs: list[Any], cparams: dict[str, Any]) -> None:
            if self.identity is not None:
                self.check()
                # only the file that exists: a vanished one is not created again at the path
                cargs[:] = [f"file:{urllib.parse.quote(str(self.path))}?mode=rw"]
                cparams["uri"] = True

        @event.listens_for(engine, "checkout")
        def _checkout(_dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
            self.check()

        @event.listens_for(engine, "commit")
        def _commit(_conn: Any) -> None:
            why = self.problem()
            if why is not None:
                raise sa_exc.OperationalError("COMMIT", None, sqlite3.OperationalError(why))


def check_store(engine: Engine) -> None:
    """Raise (answered 503) if ``engine``'s SQLite file vanished: called after a commit and
    before its answer, since a file deleted between the commit's own check and the write
    leaves the write in the unlinked file, which the next start does not find."""
    why = store_problem(engine)
    if why is not None:
        raise sa_exc.OperationalError("COMMIT", None, sqlite3.OperationalError(why))


def store_problem(engine: Engine) -> str | None:
    """Why ``engine``'s SQLite file cannot be used any more (:class:`StoreFile`); else None."""
    guard = StoreFile._of.get(engine)
    return guard.problem() if guard is not None else None


#: Connections that carry the model's arrays (reading the model row and changed task rows,
#: committing an update, reading batches) come from a pool of their own, this small: libpq
#: keeps each connection's buffers at the size of the largest message it carried, and these
#: transfers are serialized anyway (refresh under the cache lock, commit under the update
#: lock), so 2 connections carry them and the request pool stays small; see docs/operations.md.
BULK_POOL_SIZE = 2


def make_bulk_engine(settings: Settings, engine: Engine) -> Engine:
    """The engine for the large transfers: ``engine`` itself on SQLite, else a second small pool.

    Pre-pinged, as every pool (:func:`make_engine`): it must not depend on a failing request
    of its own to notice a database restart."""
    if engine.dialect.name == "sqlite":
        return engine
    return make_engine(settings, pool_size=BULK_POOL_SIZE)


def alembic_config(url: str | None = None) -> Config:
    """The Alembic configuration of the installed migrations (``url``: else DATABASE_URL)."""
    from alembic.config import Config

    where = migrations_dir()
    cfg = Config(str(where / "alembic.ini"))
    cfg.set_main_option("script_location", str(where))
    if url:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade_schema(engine: Engine, wait: float = 120.0) -> None:
    """``alembic upgrade head`` on this engine (used for the embedded SQLite default).

    On an SQLite file, under an exclusive file lock next to it (``<db>.migrate.lock``, the
    ``filelock`` library): the workers of ``uvicorn --workers N`` start together, and the
    first migrates (and switches the file to WAL) while the others wait, then find it done."""
    path = sqlite_file(engine.url.render_as_string(hide_password=False)) if engine.dialect.name == "sqlite" else None
    if path is None:
        _upgrade_schema(engine)
        return
    import filelock

    with filelock.FileLock(str(path.with_name(path.name + ".migrate.lock")), timeout=wait):
        _upgrade_schema(engine)


def _upgrade_schema(engine: Engine) -> None:
    from alembic import command

    with engine.begin() as conn:
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def schema_present(engine: Engine) -> bool:
    with engine.connect() as conn:
        names = set(inspect(conn).get_table_names())
    return {"models", "tasks", "batches"} <= names


def main(argv: list[str] | None = None) -> int:
    """``python -m service.db upgrade``: ``alembic upgrade head`` on DATABASE_URL (or the SQLite default)."""
    args = sys.argv[1:] if argv is None else argv
    if args != ["upgrade"]:
        print("usage: python -m service.db upgrade", file=sys.stderr)
        return 2
    from alembic import command

    command.upgrade(alembic_config(Settings().database_url), "head")
    return 0


if __name__ == "__main__":
    sys.exit(main())
