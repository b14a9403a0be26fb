"""Alembic environment (sync). URL: the `sqlalchemy.url` option if set (tests), else the
service's Settings (DATABASE_URL, or the SQLite default). A connection passed in
``config.attributes["connection"]`` is used as is (the service's embedded start-up).
Installed as ``fcl3_migrations.env``; run by Alembic, never imported by the service."""
from __future__ import annotations

import logging

from alembic import context
from sqlalchemy import create_engine, pool

from service.config import Settings
from service.store.tables import Base

config = context.config
if config.attributes.get("connection") is None:  # the alembic command: its progress on stderr
    logging.basicConfig(level=logging.WARNING, format="%(levelname)-5.5s [%(name)s] %(message)s")

target_metadata = Base.metadata


def _url() -> str:
    return config.get_main_option("sqlalchemy.url") or Settings().database_url


def _configure(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite cannot ALTER most things
        compare_type=True,
    )


def run_migrations_offline() -> None:
    url = _url()
    context.configure(url=url, target_metadata=target_metadata, literal_binds=True,
                      render_as_batch=url.startswith("sqlite"))
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(_url(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


logging.getLogger("alembic.runtime.migration").setLevel(logging.WARNING if config.attributes.get("connection") else logging.INFO)

if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
