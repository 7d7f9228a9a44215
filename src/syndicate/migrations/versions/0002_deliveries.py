"""Digest issues, the articles each carried, one delivery row per reader, and send runs.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "issues",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("lang", sa.String(35), nullable=False),
        sa.Column("audiences", sa.String(400), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("subject", sa.Text, nullable=False),
        sa.Column("rendered", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("lang", "audiences", "content_hash", name="uq_issues_content"),
    )
    op.create_table(
        "issue_articles",
        sa.Column("issue_id", sa.Integer, sa.ForeignKey("issues.id"), primary_key=True),
        sa.Column("lang", sa.String(35), primary_key=True),
        sa.Column("slug", sa.String(200), primary_key=True),
        sa.Column("digest", sa.String(64), nullable=False),
    )
    op.create_table(
        "send_runs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "deliveries",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("issue_id", sa.Integer, sa.ForeignKey("issues.id"), nullable=False),
        sa.Column("subscriber_id", sa.Integer, nullable=False),
        sa.Column("email", sa.String(320), nullable=False),
        sa.Column("message_id", sa.String(255), nullable=False, unique=True),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("run_id", sa.Integer, nullable=True),
        sa.Column("reply", sa.Text, nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("issue_id", "subscriber_id", name="uq_deliveries_reader"),
    )
    op.create_index("ix_deliveries_status", "deliveries", ["status", "id"])


def downgrade() -> None:
    op.drop_index("ix_deliveries_status", "deliveries")
    op.drop_table("deliveries")
    op.drop_table("send_runs")
    op.drop_table("issue_articles")
    op.drop_table("issues")
