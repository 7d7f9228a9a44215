"""Bounce reports: each DSN, feedback report or bounce matched to a reader, once.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "bounce_reports",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("digest", sa.String(64), nullable=False, unique=True),
        sa.Column("subscriber_id", sa.Integer, nullable=False),
        sa.Column("delivery_id", sa.Integer, nullable=True),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("status", sa.String(40), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("matched_by", sa.String(20), nullable=False),
        sa.Column("counted", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_bounce_reports_subscriber", "bounce_reports", ["subscriber_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_bounce_reports_subscriber", "bounce_reports")
    op.drop_table("bounce_reports")
