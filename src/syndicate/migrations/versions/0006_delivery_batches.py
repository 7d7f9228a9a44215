"""Delivery batches: each delivery belongs to one batch of its issue, the unit a worker sends
as one job when sends are spread over several machines (``send.engine``); and the token
bucket of each relay those workers share.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("deliveries", sa.Column("batch_no", sa.Integer, nullable=True))
    op.create_index("ix_deliveries_batch", "deliveries", ["issue_id", "batch_no"])
    op.create_table(
        "relay_buckets",
        sa.Column("relay", sa.String(255), primary_key=True),
        sa.Column("rate", sa.Float, nullable=False),
        sa.Column("burst", sa.Float, nullable=False),
        sa.Column("tokens", sa.Float, nullable=False),
        sa.Column("refilled_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("relay_buckets")
    op.drop_index("ix_deliveries_batch", "deliveries")
    op.drop_column("deliveries", "batch_no")
