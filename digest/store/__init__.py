"""Storage: the ORM models, engine and sessions, read queries, run locks."""
