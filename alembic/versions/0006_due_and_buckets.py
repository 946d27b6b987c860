"""when a source is due again; token buckets shared by every worker

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 18:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('source', schema=None) as batch_op:
        batch_op.add_column(sa.Column('next_fetch_at', sa.DateTime(), nullable=True))
    op.create_table(
        'rate_bucket',
        sa.Column('key', sa.String(length=200), nullable=False),
        sa.Column('tokens', sa.Float(), nullable=False),
        sa.Column('updated_at', sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint('key', name=op.f('pk_rate_bucket')),
    )


def downgrade() -> None:
    op.drop_table('rate_bucket')
    with op.batch_alter_table('source', schema=None) as batch_op:
        batch_op.drop_column('next_fetch_at')
