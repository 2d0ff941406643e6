"""Alembic migrations of the meshplan database (shipped inside the package)."""
