"""Issue approval, and delivery at each reader's local time.

An issue may be held for an editor, then issued, rejected or expired; the same-content rule
becomes a unique index over the issues that stand (issued or held), so a rejected or expired
issue's content may be issued again. A reader may have a time zone, and a delivery a time
before which it is not sent.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_STANDING = sa.text("state IN ('issued', 'held')")
_COLUMNS = "id, key, lang, audiences, content_hash, subject, rendered, created_at"


def _issues(*extra: sa.schema.SchemaItem) -> None:
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
        *extra,
    )


def _rebuild_sqlite(*extra: sa.schema.SchemaItem) -> None:
    """SQLite changes a table constraint only by rebuilding the table. Deliveries and issue
    articles refer to it, so their check is deferred to the commit, and the table is dropped
    before it is made again (each row put back then settles the rows that refer to it)."""
    op.execute("PRAGMA defer_foreign_keys = ON")
    op.execute(f"CREATE TABLE _issues_copy AS SELECT {_COLUMNS} FROM issues")
    op.drop_table("issues")
    _issues(*extra)
    op.execute(f"INSERT INTO issues ({_COLUMNS}) SELECT {_COLUMNS} FROM _issues_copy")
    op.drop_table("_issues_copy")


def upgrade() -> None:
    op.add_column("subscribers", sa.Column("timezone", sa.String(64), nullable=True))
    op.add_column("deliveries", sa.Column("not_before", sa.DateTime(timezone=True), nullable=True))
    state = sa.Column("state", sa.String(20), nullable=False, server_default="issued")
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_sqlite(state)
    else:
        op.add_column("issues", state)
        op.drop_constraint("uq_issues_content", "issues", type_="unique")
    op.create_index(
        "uq_issues_content",
        "issues",
        ["lang", "audiences", "content_hash"],
        unique=True,
        sqlite_where=_STANDING,
        postgresql_where=_STANDING,
    )


def downgrade() -> None:
    with op.batch_alter_table("deliveries") as batch:
        batch.drop_column("not_before")
    with op.batch_alter_table("subscribers") as batch:
        batch.drop_column("timezone")
    op.drop_index("uq_issues_content", "issues")
    unique = sa.UniqueConstraint("lang", "audiences", "content_hash", name="uq_issues_content")
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_sqlite(unique)
    else:
        op.drop_column("issues", "state")
        op.create_unique_constraint(
            "uq_issues_content", "issues", ["lang", "audiences", "content_hash"]
        )
