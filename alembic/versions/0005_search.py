"""full-text search: search_fts (SQLite FTS5, trigram) or search_doc (PostgreSQL tsvector + GIN)

The index is outside the models (alembic/env.py ignores tables named search_*): it is written
only by digest.store.search.refresh. Existing digests are indexed here.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 18:30:00
"""

from __future__ import annotations

from alembic import op
from sqlalchemy.exc import DBAPIError

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None

# (kind, ref_id, locale, title, body): the documents as digest.store.search.DOCUMENTS writes them.
_SHOWN = 'SELECT event_id FROM digest_event'
_DOCUMENTS = (
    f"SELECT 'event', e.id, '', e.title, '' FROM event e WHERE e.id IN ({_SHOWN})",
    "SELECT 'event', w.event_id, w.locale, w.title, w.summary || ' ' || w.why_it_matters "
    f"FROM writeup w WHERE w.event_id IN ({_SHOWN})",
    "SELECT 'digest', t.digest_id, t.locale, t.title, t.overview FROM digest_text t",
)

_POSTGRES = (
    """CREATE TABLE search_doc (
        id serial PRIMARY KEY,
        kind varchar(8) NOT NULL,
        ref_id integer NOT NULL,
        locale varchar(8) NOT NULL,
        title text NOT NULL,
        body text NOT NULL,
        tsv tsvector GENERATED ALWAYS AS (
            setweight(to_tsvector('simple', title), 'A') || setweight(to_tsvector('simple', body), 'B')
        ) STORED
    )""",
    'CREATE INDEX search_doc_ref ON search_doc (kind, ref_id)',
    'CREATE INDEX search_doc_tsv ON search_doc USING gin (tsv)',
)
# Substring (ILIKE) matches of three characters or more use trigrams when pg_trgm can be had.
_TRGM = ('CREATE INDEX search_doc_title_trgm ON search_doc USING gin (title gin_trgm_ops)',
         'CREATE INDEX search_doc_body_trgm ON search_doc USING gin (body gin_trgm_ops)')


def _pg_trgm() -> bool:
    """Create pg_trgm if it is available and we may (a trusted extension since PostgreSQL 13)."""
    bind = op.get_bind()
    if bind.exec_driver_sql("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'").first():
        return True
    can = bind.exec_driver_sql(
        "SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm' "
        "AND has_database_privilege(current_database(), 'CREATE')").first()
    if not can:
        return False
    try:
        with bind.begin_nested():  # a refusal rolls back to here; ILIKE then scans
            bind.exec_driver_sql('CREATE EXTENSION IF NOT EXISTS pg_trgm')
    except DBAPIError:
        return False
    return True


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == 'sqlite':
        table = 'search_fts'
        op.execute("CREATE VIRTUAL TABLE search_fts USING fts5("
                   "kind UNINDEXED, ref_id UNINDEXED, locale UNINDEXED, title, body, tokenize='trigram')")
    else:
        table = 'search_doc'
        for sql in _POSTGRES:
            op.execute(sql)
        if _pg_trgm():
            for sql in _TRGM:
                op.execute(sql)
    for select_sql in _DOCUMENTS:
        op.execute(f'INSERT INTO {table} (kind, ref_id, locale, title, body) {select_sql}')


def downgrade() -> None:
    if op.get_bind().dialect.name == 'sqlite':
        op.execute('DROP TABLE search_fts')
    else:
        op.execute('DROP TABLE search_doc')
