"""First publication dates of feed entries, and subscribers.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "published",
        sa.Column("lang", sa.String(35), primary_key=True),
        sa.Column("slug", sa.String(200), primary_key=True),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "subscribers",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("email", sa.String(320), nullable=False, unique=True),
        sa.Column("lang", sa.String(35), nullable=False),
        sa.Column("audiences", sa.String(400), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("consent_source", sa.String(200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("bounces", sa.Integer, nullable=False, server_default="0"),
    )


def downgrade() -> None:
    op.drop_table("subscribers")
    op.drop_table("published")
