"""run reports; partial and hidden digests; the Discord thread of a delivery; entry bodies

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 18:05:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'run_report',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('date', sa.Date(), nullable=False),
        sa.Column('trigger', sa.String(length=16), nullable=False),
        sa.Column('started_at', sa.DateTime(), nullable=False),
        sa.Column('finished_at', sa.DateTime(), nullable=False),
        sa.Column('ok', sa.Boolean(), nullable=False),
        sa.Column('report', sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_run_report')),
    )
    op.create_index('ix_run_report_date_started', 'run_report', ['date', 'started_at'], unique=False)
    with op.batch_alter_table('digest', schema=None) as batch_op:
        batch_op.add_column(sa.Column('partial', sa.Boolean(), nullable=False, server_default=sa.false()))
        batch_op.add_column(sa.Column('hidden_at', sa.DateTime(), nullable=True))
    with op.batch_alter_table('delivery', schema=None) as batch_op:
        batch_op.add_column(sa.Column('thread_id', sa.String(length=32), nullable=True))
    with op.batch_alter_table('entry', schema=None) as batch_op:
        batch_op.add_column(sa.Column('body', sa.Text(), nullable=False, server_default=''))
    # A Discord channel subscriber's address is the bare channel id (it was stored as channel:<id>).
    subscriber = sa.table('subscriber', sa.column('channel', sa.String()), sa.column('address', sa.String()))
    op.get_bind().execute(
        subscriber.update()
        .where(subscriber.c.channel == 'discord', subscriber.c.address.like('channel:%'))
        .values(address=sa.func.substr(subscriber.c.address, len('channel:') + 1)))


def downgrade() -> None:
    with op.batch_alter_table('entry', schema=None) as batch_op:
        batch_op.drop_column('body')
    with op.batch_alter_table('delivery', schema=None) as batch_op:
        batch_op.drop_column('thread_id')
    with op.batch_alter_table('digest', schema=None) as batch_op:
        batch_op.drop_column('hidden_at')
        batch_op.drop_column('partial')
    op.drop_index('ix_run_report_date_started', table_name='run_report')
    op.drop_table('run_report')
