"""delivery: an explicit lease (lease_until), the resumed flag, and why a row failed (failure)

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 17:30:00

Rows left ``sending`` by an older version keep the lease that version gave them
(600 s from ``claimed_at``). Rows already ``failed`` get a reason from what
the row and its subscriber show: a bounced or blocked subscriber was a
permanent refusal, ``MAX_ATTEMPTS`` (10) attempts were exhausted, anything
else was our bug or configuration (so ``publish --retry-failed`` can retry it).
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None

_OLD_LEASE = dt.timedelta(seconds=600)
_DELIVERY = sa.table('delivery', sa.column('id', sa.Integer()), sa.column('status', sa.String()),
                     sa.column('claimed_at', sa.DateTime()), sa.column('lease_until', sa.DateTime()))


def upgrade() -> None:
    with op.batch_alter_table('delivery', schema=None) as batch_op:
        batch_op.add_column(sa.Column('lease_until', sa.DateTime(), nullable=True))
        batch_op.add_column(sa.Column('resumed', sa.Boolean(), nullable=False, server_default=sa.false()))
        batch_op.add_column(sa.Column('failure', sa.String(length=16), nullable=True))
    bind = op.get_bind()
    sending = bind.execute(sa.select(_DELIVERY.c.id, _DELIVERY.c.claimed_at)
                           .where(_DELIVERY.c.status == 'sending')).all()
    for row_id, claimed_at in sending:
        until = None if claimed_at is None else claimed_at + _OLD_LEASE
        bind.execute(sa.update(_DELIVERY).where(_DELIVERY.c.id == row_id).values(lease_until=until))
    op.execute(
        "UPDATE delivery SET failure = CASE"
        " WHEN EXISTS (SELECT 1 FROM subscriber WHERE subscriber.id = delivery.subscriber_id"
        " AND subscriber.status IN ('bounced', 'blocked')) THEN 'permanent'"
        " WHEN attempts >= 10 THEN 'exhausted' ELSE 'bug' END"
        " WHERE status = 'failed'"
    )


def downgrade() -> None:
    with op.batch_alter_table('delivery', schema=None) as batch_op:
        batch_op.drop_column('failure')
        batch_op.drop_column('resumed')
        batch_op.drop_column('lease_until')
