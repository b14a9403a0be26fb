"""Engines (sync SQLAlchemy 2.x) and the schema's migrations (Alembic, from the installed
package ``fcl3_migrations``); ``python -m service.db upgrade`` runs them on DATABASE_URL."""
from __future__ import annotations

import importlib.util
import logging
import os
import sqlite3
import sys
import threading
import urllib.parse
import weakref
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy import exc as sa_exc

from .config import Settings

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


def make_engine(settings: Settings, pool_size: int | None = None, pre_ping: bool = False) -> Engine:
    """The engine of ``settings``; ``pool_size`` overrides ``DB_POOL_SIZE`` (as many again may overflow).

    On an SQLite file, the file is guarded (:class:`StoreFile`): once it is deleted or replaced
    under the running process, every use of the engine fails (503)."""
    url = settings.database_url
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
        guard = StoreFile.of(engine)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record):  # WAL: readers never block the writer
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
    # No pool_pre_ping (it would add a round trip to every request): when the database
    # drops connections, the first statement that hits a dead one fails (503) and SQLAlchemy
    # invalidates the whole pool on that disconnect, so the service recovers by itself.
    # The pool is as large as the request concurrency one process sees: a smaller pool makes
    # threads open and close overflow connections on every request.
    size = pool_size or settings.DB_POOL_SIZE
    return create_engine(url, pool_pre_ping=pre_ping, pool_size=size, max_overflow=size, connect_args=connect_args)


class StoreFile:
    """The identity of an SQLite engine's file: ``(st_dev, st_ino)`` at its first connection.

    A file deleted under a running process stays readable and writable by the connections
    that have it open, but nothing written there survives the process: the next start finds
    no file, or another one. So once the path no longer leads to the file first opened (it
    was deleted, or replaced by another file, a copy of itself included), the engine refuses
    every connection from the pool, opens none (nothing is created at the path) and refuses
    every commit: each answers 503 naming the file, and ``/readyz`` is not ready, until the
    process is restarted on the file now in place. The check is one ``stat`` of the path."""

    _of: "weakref.WeakKeyDictionary[Engine, StoreFile]" = weakref.WeakKeyDictionary()

    def __init__(self, path: Path):
        self.path = path
        self.identity: tuple[int, int] | None = None
        self._lock = threading.Lock()

    @classmethod
    def of(cls, engine: Engine) -> "StoreFile | None":
        """The guard of ``engine`` (made on the first call); None: not an SQLite file."""
        guard = cls._of.get(engine)
        if guard is None and engine.dialect.name == "sqlite":
            from .locks import sqlite_file

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
        return (f"database file deleted or replaced under the running service: {self.path} was {what}; "
                "nothing is written any more (what this process wrote since is not in the file at that path): "
                "restart the service once the right file is in place")

    def check(self) -> None:
        """Raise ``sqlite3.OperationalError`` (answered 503) if the file is gone."""
        why = self.problem()
        if why is not None:
            raise sqlite3.OperationalError(why)

    def opened(self) -> None:
        """At each new connection: take the file's identity (the first), else check it."""
        with self._lock:
            if self.identity is None:
                try:
                    st = os.stat(self.path)
                except OSError:
                    return  # gone already: the next connection takes the identity
                self.identity = (st.st_dev, st.st_ino)
                return
        self.check()

    def install(self, engine: Engine) -> None:
        """Check the file before each new connection is opened, each pooled connection is
        used, and each commit."""

        @event.listens_for(engine, "do_connect")
        def _open_existing(_dialect, _record, cargs, cparams):
            if self.identity is not None:
                self.check()
                # only the file that exists: a vanished one is not created again at the path
                cargs[:] = [f"file:{urllib.parse.quote(str(self.path))}?mode=rw"]
                cparams["uri"] = True

        @event.listens_for(engine, "checkout")
        def _checkout(_dbapi_conn, _record, _proxy):
            self.check()

        @event.listens_for(engine, "commit")
        def _commit(conn):
            why = self.problem()
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

    With ``pool_pre_ping``: its statements are few (one refresh or commit per model version),
    so the extra round trip is nothing, and it must not depend on a failing request of its
    own to notice a database restart — the request pool can fail, invalidate itself and
    recover while this pool's connections sit unused."""
    if engine.dialect.name == "sqlite":
        return engine
    return make_engine(settings, pool_size=BULK_POOL_SIZE, pre_ping=True)


def alembic_config(url: str | None = None):
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
    from .locks import sqlite_file

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
