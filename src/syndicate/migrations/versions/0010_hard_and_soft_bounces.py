"""Hard and soft bounces counted apart: ``soft_bounces`` with no successful delivery in
between, ``first_soft_at`` (when the first of them came), ``last_soft_delivery`` (the delivery
whose soft bounce was counted last) and the last bounce's reason; ``bounces`` counts hard
bounces only from now on. A reader's deliveries get an index in id order
(``ix_deliveries_reader``): a soft bounce looks for those sent since the last one.

The count before this revision mixed both kinds (any 5xx at the send, a full mailbox's too,
and hard bounce mail), so it moves to ``soft_bounces``, as of its last bounce: the upgrade
drops nobody (a count brought over as hard would stop a reader at their next bounce of any
kind); an address that is gone is still dropped at its next hard bounce, and one that works
has its count started again at its next soft bounce if a delivery after the upgrade got
through (a count brought over is as of the reader's last delivery then). The downgrade adds
the soft count back.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def _subscribers(*extra: sa.ColumnClause) -> sa.TableClause:
    return sa.table(
        "subscribers",
        sa.column("bounces", sa.Integer),
        sa.column("last_bounce_at", sa.DateTime(timezone=True)),
        *extra,
    )


def upgrade() -> None:
    with op.batch_alter_table("subscribers") as table:
        table.add_column(sa.Column("soft_bounces", sa.Integer, nullable=False, server_default="0"))
        table.add_column(sa.Column("first_soft_at", sa.DateTime(timezone=True), nullable=True))
        table.add_column(sa.Column("last_reason", sa.String(40), nullable=True))
        table.add_column(sa.Column("last_soft_delivery", sa.Integer, nullable=True))
    op.create_index("ix_deliveries_reader", "deliveries", ["subscriber_id", "id"])
    subscribers = _subscribers(
        sa.column("id", sa.Integer),
        sa.column("soft_bounces", sa.Integer),
        sa.column("first_soft_at", sa.DateTime(True)),
        sa.column("last_soft_delivery", sa.Integer),
    )
    deliveries = sa.table(
        "deliveries", sa.column("id", sa.Integer), sa.column("subscriber_id", sa.Integer)
    )
    last_delivery = (
        sa.select(sa.func.max(deliveries.c.id))
        .where(deliveries.c.subscriber_id == subscribers.c.id)
        .scalar_subquery()
    )
    op.execute(
        subscribers.update()
        .where(subscribers.c.bounces > 0)
        .values(
            soft_bounces=subscribers.c.bounces,
            first_soft_at=subscribers.c.last_bounce_at,
            last_soft_delivery=last_delivery,
            bounces=0,
            last_bounce_at=None,
        )
    )


def downgrade() -> None:
    subscribers = _subscribers(
        sa.column("soft_bounces", sa.Integer), sa.column("first_soft_at", sa.DateTime(True))
    )
    op.execute(
        subscribers.update()
        .where(subscribers.c.soft_bounces > 0)
        .values(
            bounces=subscribers.c.bounces + subscribers.c.soft_bounces,
            last_bounce_at=sa.func.coalesce(
                subscribers.c.last_bounce_at, subscribers.c.first_soft_at
            ),
        )
    )
    op.drop_index("ix_deliveries_reader", table_name="deliveries")
    with op.batch_alter_table("subscribers") as table:
        table.drop_column("last_soft_delivery")
        table.drop_column("last_reason")
        table.drop_column("first_soft_at")
        table.drop_column("soft_bounces")
