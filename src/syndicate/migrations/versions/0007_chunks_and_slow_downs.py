"""Issues planned in chunks (the reader id planned through, the local time their later chunks
wait for, an index to read a variant's readers in id order), closed once every delivery is
settled (the issues settled already are closed here, at their last delivery's time); and a
relay's shared rate cut when it asks senders to slow down; the pending deliveries indexed
apart, so that taking the next one never depends on the table's statistics.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("issues", sa.Column("planned_through", sa.Integer, nullable=True))
    op.add_column("issues", sa.Column("local_time", sa.String(5), nullable=True))
    op.add_column("issues", sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index("ix_subscribers_variant", "subscribers", ["lang", "audiences", "status", "id"])
    _close_settled()
    pending = sa.text("status = 'pending'")
    for name, columns in [
        ("ix_deliveries_pending", ["id"]),
        ("ix_deliveries_pending_batch", ["issue_id", "batch_no", "id"]),
    ]:
        op.create_index(name, "deliveries", columns, sqlite_where=pending, postgresql_where=pending)
    op.add_column("relay_buckets", sa.Column("cut_rate", sa.Float, nullable=True))
    op.add_column("relay_buckets", sa.Column("cut_at", sa.DateTime(timezone=True), nullable=True))


def _close_settled() -> None:
    """The issues sent in full before this revision are closed now, at the time of their last
    delivery, so that the first send after the upgrade does not report each as just finished."""
    issues = sa.table(
        "issues",
        sa.column("id"),
        sa.column("state"),
        sa.column("created_at"),
        sa.column("finished_at"),
    )
    deliveries = sa.table(
        "deliveries", sa.column("issue_id"), sa.column("status"), sa.column("updated_at")
    )
    mine = deliveries.c.issue_id == issues.c.id
    last = sa.select(sa.func.max(deliveries.c.updated_at)).where(mine).scalar_subquery()
    left = sa.select(deliveries.c.issue_id).where(
        mine, deliveries.c.status.in_(("held", "pending", "sending"))
    )
    op.execute(
        sa.update(issues)
        .where(issues.c.state == "issued", ~left.exists())
        .values(finished_at=sa.func.coalesce(last, issues.c.created_at))
    )


def downgrade() -> None:
    with op.batch_alter_table("relay_buckets") as table:
        table.drop_column("cut_at")
        table.drop_column("cut_rate")
    op.drop_index("ix_deliveries_pending_batch", table_name="deliveries")
    op.drop_index("ix_deliveries_pending", table_name="deliveries")
    op.drop_index("ix_subscribers_variant", table_name="subscribers")
    with op.batch_alter_table("issues") as table:
        table.drop_column("local_time")
        table.drop_column("finished_at")
        table.drop_column("planned_through")
