"""Persistence: SQLModel tables, engine/session management, CRUD and Alembic migrations."""
