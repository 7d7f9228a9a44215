"""When a reader's bounces were last counted, so that a count older than the bounce window is
forgotten at the next bounce (the readers with bounces counted before this revision take the
time their row last changed).

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "subscribers", sa.Column("last_bounce_at", sa.DateTime(timezone=True), nullable=True)
    )
    subscribers = sa.table(
        "subscribers",
        sa.column("bounces", sa.Integer),
        sa.column("updated_at", sa.DateTime(timezone=True)),
        sa.column("last_bounce_at", sa.DateTime(timezone=True)),
    )
    op.execute(
        subscribers.update()
        .where(subscribers.c.bounces > 0)
        .values(last_bounce_at=subscribers.c.updated_at)
    )


def downgrade() -> None:
    with op.batch_alter_table("subscribers") as table:
        table.drop_column("last_bounce_at")
