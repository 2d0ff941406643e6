"""Alembic environment: migrates the connection handed over by `app.db.migrate`, or the
database named by `MESHPLAN_DATABASE_URL` when run from the `alembic` command line."""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlmodel import SQLModel

import app.db.models  # noqa: F401  (registers the tables on SQLModel.metadata)
from app.core.config import Settings
from app.db.session import make_engine

config = context.config
target_metadata = SQLModel.metadata

if config.config_file_name is not None and config.attributes.get("configure_logger", False):
    fileConfig(config.config_file_name)


def _run(connection: object) -> None:
    context.configure(
        connection=connection,  # type: ignore[arg-type]
        target_metadata=target_metadata,
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    url = config.get_main_option("sqlalchemy.url") or Settings().database_url
    context.configure(url=url, target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url") or Settings().database_url
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            _run(conn)
            conn.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
