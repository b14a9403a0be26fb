"""Engine, sessions and schema creation (sync SQLAlchemy 2.x)."""
from __future__ import annotations

import logging
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, inspect

from .config import Settings

log = logging.getLogger("service.db")

ROOT = Path(__file__).resolve().parents[1]
ALEMBIC_INI = ROOT / "alembic.ini"
MIGRATIONS = ROOT / "migrations"


def make_engine(settings: Settings, pool_size: int | None = None, pre_ping: bool = False) -> Engine:
    """The engine of ``settings``; ``pool_size`` overrides ``DB_POOL_SIZE`` (as many again may overflow)."""
    url = settings.database_url
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record):  # WAL: readers never block the writer
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=FULL")
            cur.close()

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
    from alembic.config import Config

    cfg = Config(str(ALEMBIC_INI))
    cfg.set_main_option("script_location", str(MIGRATIONS))
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

    if ALEMBIC_INI.exists() and MIGRATIONS.exists():
        with engine.begin() as conn:
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
    else:  # installed without the migrations folder: create the tables directly
        from .tables import Base

        log.warning("migrations folder not found; creating tables with metadata.create_all")
        Base.metadata.create_all(engine)


def schema_present(engine: Engine) -> bool:
    with engine.connect() as conn:
        names = set(inspect(conn).get_table_names())
    return {"models", "tasks", "batches"} <= names
