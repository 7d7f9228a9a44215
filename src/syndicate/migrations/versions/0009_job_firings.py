"""Owed scheduled runs as rows of their own (``job_firings``); the paused "interrupted:" marker
jobs of earlier versions become owed rows, due when this migration runs.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_MARKER = "interrupted:"


def upgrade() -> None:
    firings = op.create_table(
        "job_firings",
        sa.Column("job_id", sa.String(200), primary_key=True),
        sa.Column("due_at", sa.DateTime(timezone=True), primary_key=True),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    if not sa.inspect(op.get_bind()).has_table("apscheduler_jobs"):
        return
    jobs = sa.table("apscheduler_jobs", sa.column("id", sa.String))
    marked = jobs.c.id.like(_MARKER + "%")
    now = sa.func.current_timestamp()
    owed = sa.select(
        sa.func.substr(jobs.c.id, len(_MARKER) + 1),
        now,
        sa.literal("owed"),
        sa.literal("interrupted before an upgrade"),
        now,
    ).where(marked)
    op.execute(firings.insert().from_select([c.name for c in firings.columns], owed))
    op.execute(jobs.delete().where(marked))


def downgrade() -> None:
    op.drop_table("job_firings")
