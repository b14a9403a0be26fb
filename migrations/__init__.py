"""The service's Alembic migrations, installed as the package ``fcl3_migrations`` (the
repository keeps them at the top, in ``migrations/``): :func:`service.db.alembic_config`."""
