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


def make_engine(settings: Settings) -> Engine:
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
    return create_engine(url, pool_pre_ping=False, pool_size=settings.DB_POOL_SIZE, max_overflow=settings.DB_POOL_SIZE, connect_args=connect_args)


def alembic_config(url: str | None = None):
    from alembic.config import Config

    cfg = Config(str(ALEMBIC_INI))
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if url:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade_schema(engine: Engine) -> None:
    """``alembic upgrade head`` on this engine (used for the embedded SQLite default)."""
    from alembic import command

    if ALEMBIC_INI.exists() and MIGRATIONS.exists():
        with engine.begin() as conn:
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
    else:  # installed without the migrations folder: create the tables directly
        from .models import Base

        log.warning("migrations folder not found; creating tables with metadata.create_all")
        Base.metadata.create_all(engine)


def schema_present(engine: Engine) -> bool:
    with engine.connect() as conn:
        names = set(inspect(conn).get_table_names())
    return {"models", "tasks", "batches"} <= names
