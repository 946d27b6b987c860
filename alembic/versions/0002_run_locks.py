"""run locks: one row per named lock of a running command (SQLite; PostgreSQL uses advisory locks)

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 17:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('run_lock',
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('holder', sa.String(length=200), nullable=False),
    sa.Column('acquired_at', sa.DateTime(), nullable=False),
    sa.Column('expires_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_run_lock'))
    )


def downgrade() -> None:
    op.drop_table('run_lock')
