"""What a group has been sent, not the date line, decides its next digest: ``published.seen_at``
(when an article was first recorded, whatever its date line says) and ``issue_articles.updated``
(the date line of the version an issue carried, so a revision dated later goes out again).
Rows from before this revision have neither: their date lines stand in for both.

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("published") as table:
        table.add_column(sa.Column("seen_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("issue_articles") as table:
        table.add_column(sa.Column("updated", sa.Date, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("issue_articles") as table:
        table.drop_column("updated")
    with op.batch_alter_table("published") as table:
        table.drop_column("seen_at")
