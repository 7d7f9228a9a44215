"""The two real databases every store test runs on: a SQLite file and PostgreSQL.

Each PostgreSQL test gets a schema of its own (dropped afterwards), so test runs never see
each other's rows, even when several share the one server.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.conftest import missing_real_part

POSTGRES_URL = os.environ.get(
    "SYNDICATE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def postgres_schema() -> Iterator[str]:
    """A URL of PostgreSQL whose search path is a fresh schema, dropped when the test ends."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    try:
        engine = sa.create_engine(POSTGRES_URL)
    except ModuleNotFoundError as exc:
        missing_real_part(f"no PostgreSQL driver (pip install 'syndicate[postgres]'): {exc}")
    try:
        with engine.begin() as db:
            db.execute(sa.text(f"CREATE SCHEMA {schema}"))
    except sa.exc.OperationalError as exc:
        engine.dispose()
        missing_real_part(f"PostgreSQL not reachable at {POSTGRES_URL}: {exc.orig}")
    sep = "&" if "?" in POSTGRES_URL else "?"
    yield f"{POSTGRES_URL}{sep}options=-csearch_path%3D{schema}"
    with engine.begin() as db:
        db.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/state.db"
        return
    yield from postgres_schema()


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """PostgreSQL alone: what runs only there (the scale-out engine)."""
    yield from postgres_schema()


@pytest.fixture
def scale_extra() -> None:
    """The scale-out engine installed (the optional extra syndicate[scale])."""
    try:
        import syndicate.sending.scale  # noqa: F401
    except ImportError as exc:
        missing_real_part(f"procrastinate is not installed (pip install 'syndicate[scale]'): {exc}")


@pytest.fixture
def scale_url(postgres_url: str, scale_extra: None) -> str:
    """PostgreSQL with the scale-out engine installed."""
    return postgres_url
