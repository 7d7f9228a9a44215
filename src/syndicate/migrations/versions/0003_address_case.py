"""One reader per mailbox, whatever the letter case: a key column, unique, and duplicates merged.

``Reader@Example.ORG`` and ``reader@example.org`` were two readers (and got two messages).
Each set of such rows becomes one: the earliest row is kept, with its address as first given
and its consent (source and date); its status becomes the most restrictive of the set, and
language and audiences those the reader chose last. Deliveries move to the kept row where it
has none for the same issue (the ledger keeps the others as they were). Every merge is logged.

Revision ID: 0003
Revises: 0002
"""

import logging
from collections import defaultdict

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

log = logging.getLogger("syndicate.migrations")

RESTRICTIVE = ("active", "pending", "bounced", "unsubscribed")
"""Statuses from the least to the most restrictive: a reader who left stays gone."""


def _key(email: str) -> str:
    """``subscribers.address_key`` as of this revision (addresses were stored normalised)."""
    return email.lower()


def upgrade() -> None:
    with op.batch_alter_table("subscribers") as batch:
        batch.add_column(sa.Column("email_key", sa.String(320), nullable=True))
    db = op.get_bind()
    table = sa.table(
        "subscribers",
        sa.column("id", sa.Integer),
        sa.column("email", sa.String),
        sa.column("email_key", sa.String),
        sa.column("lang", sa.String),
        sa.column("audiences", sa.String),
        sa.column("status", sa.String),
        sa.column("created_at", sa.DateTime),
        sa.column("updated_at", sa.DateTime),
        sa.column("bounces", sa.Integer),
    )
    deliveries = sa.table(
        "deliveries", sa.column("issue_id", sa.Integer), sa.column("subscriber_id", sa.Integer)
    )
    groups: dict[str, list[sa.Row]] = defaultdict(list)
    for row in db.execute(sa.select(table).order_by(table.c.created_at, table.c.id)):
        groups[_key(row.email)].append(row)
    single = [
        {"row_id": rows[0].id, "row_key": key} for key, rows in groups.items() if len(rows) == 1
    ]
    if single:
        db.execute(
            sa.update(table)
            .where(table.c.id == sa.bindparam("row_id"))
            .values(email_key=sa.bindparam("row_key")),
            single,
        )
    for key, rows in groups.items():
        if len(rows) > 1:
            _merge(db, table, deliveries, key, rows)
    with op.batch_alter_table("subscribers") as batch:
        batch.alter_column("email_key", existing_type=sa.String(320), nullable=False)
        batch.create_index("ix_subscribers_email_key", ["email_key"], unique=True)


def _merge(
    db: sa.Connection,
    table: sa.TableClause,
    deliveries: sa.TableClause,
    key: str,
    rows: list[sa.Row],
) -> None:
    """One reader from the rows of one mailbox (see the module's docstring), logged."""
    kept, others = rows[0], rows[1:]
    latest = max(rows, key=lambda r: (r.updated_at, r.id))
    values = dict(
        email_key=key,
        status=max((r.status for r in rows), key=_rank),
        lang=latest.lang,
        audiences=latest.audiences,
        bounces=max(r.bounces for r in rows),
    )
    for other in others:
        taken = sa.select(deliveries.c.issue_id).where(deliveries.c.subscriber_id == kept.id)
        db.execute(
            sa.update(deliveries)
            .where(deliveries.c.subscriber_id == other.id)
            .where(deliveries.c.issue_id.not_in(taken))
            .values(subscriber_id=kept.id)
        )
        db.execute(sa.delete(table).where(table.c.id == other.id))
    db.execute(sa.update(table).where(table.c.id == kept.id).values(values))
    log.warning(
        "merged %d subscriber rows into %s (id %d, status %s): %s",
        len(rows),
        kept.email,
        kept.id,
        values["status"],
        ", ".join(f"{r.email} (id {r.id}, {r.status})" for r in others),
    )


def _rank(status: str) -> int:
    return RESTRICTIVE.index(status) if status in RESTRICTIVE else len(RESTRICTIVE)


def downgrade() -> None:
    with op.batch_alter_table("subscribers") as batch:
        batch.drop_index("ix_subscribers_email_key")
        batch.drop_column("email_key")
