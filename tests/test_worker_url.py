"""``syndicate worker`` on any valid database URL: Procrastinate gets the connection parameters
SQLAlchemy parsed (options with spaces, a schema of their own), and a worker that cannot start
says why in one line. On the real PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import sqlalchemy as sa

from syndicate.config import parse_config
from tests.conftest import ROOT, missing_real_part
from tests.databases import POSTGRES_URL

try:
    from syndicate.sending import scale
except ImportError:  # the optional extra syndicate[scale]: the scale_extra fixture says so
    scale = None


def with_options(options: str) -> str:
    """The test database's URL with ``options`` (already %-encoded) in its query."""
    return f"{POSTGRES_URL}{'&' if '?' in POSTGRES_URL else '?'}options={options}"


@pytest.fixture
def schema(scale_extra: None) -> Iterator[str]:
    """A schema of its own in the test database, dropped when the test ends."""
    name = f"w_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(POSTGRES_URL)
    try:
        with engine.begin() as db:
            db.execute(sa.text(f"CREATE SCHEMA {name}"))
    except sa.exc.OperationalError as exc:
        engine.dispose()
        missing_real_part(f"PostgreSQL not reachable at {POSTGRES_URL}: {exc.orig}")
    yield name
    with engine.begin() as db:
        db.execute(sa.text(f"DROP SCHEMA {name} CASCADE"))
    engine.dispose()


def spaced_url(schema: str, application: str) -> str:
    """A search path and an application name: two -c options, so spaces in the options."""
    return with_options(f"-csearch_path%3D{schema}%20-c%20application_name%3D{application}")


def write_config(root: Path, url: str) -> Path:
    path = root / "config.toml"
    path.write_text(
        f"""
[site]
base_url = "https://news.example.org"
[state]
database = "{url}"
[email]
sender = "News <digest@news.example.org>"
[smtp]
url = "smtp://127.0.0.1:25"
[web]
secret_key = "a test key that is long enough to sign tokens"
[send]
engine = "procrastinate"
poll_seconds = 0.5
heartbeat_seconds = 0.5
"""
    )
    return path


def worker_command(config_file: Path) -> list[str]:
    return [sys.executable, "-m", "syndicate", "--config", str(config_file), "worker"]


def clean_env() -> dict[str, str]:
    """This environment without the SYNDICATE_ variables that would override the config."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SYNDICATE_")}


def test_procrastinate_connects_with_the_options_as_sqlalchemy_parsed_them(
    tmp_path: Path, schema: str
) -> None:
    application = f"app-{schema}"
    config = parse_config(
        {
            "state": {"database": spaced_url(schema, application)},
            "smtp": {"url": "smtp://127.0.0.1:25"},
            "send": {"engine": "procrastinate"},
        },
        root=tmp_path,
        source="(test)",
        env={},
    )
    app = scale.make_app(config)
    query = "SELECT current_setting('search_path') AS path, current_setting('application_name')"

    async def settings() -> dict[str, str]:
        async with app.open_async():  # the pool the worker runs on
            return await app.connector.execute_query_one_async(query)

    # in a thread of its own: the browser tests' Playwright keeps an event loop running in
    # this one for the whole session, and asyncio.run refuses to start inside it
    with ThreadPoolExecutor(1) as thread:
        row = thread.submit(asyncio.run, settings()).result()
    assert (row["path"], row["current_setting"]) == (schema, application)


def test_a_worker_runs_on_a_url_whose_options_hold_spaces(tmp_path: Path, schema: str) -> None:
    application = f"worker-{schema}"
    config_file = write_config(tmp_path, spaced_url(schema, application))
    process = subprocess.Popen(
        worker_command(config_file),
        cwd=ROOT,
        env=clean_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    engine = sa.create_engine(POSTGRES_URL)
    try:
        # Procrastinate's worker row, in the schema of the URL's search path: its own
        # connection (not only SQLAlchemy's) took the options
        registered = f"SELECT count(*) FROM {schema}.procrastinate_workers"
        named = "SELECT count(*) FROM pg_stat_activity WHERE application_name = :name"
        end = time.monotonic() + 120
        while process.poll() is None and time.monotonic() < end:
            with engine.connect() as db:
                tables = sa.inspect(db).has_table("procrastinate_workers", schema=schema)
                if tables and db.scalar(sa.text(registered)):
                    assert db.scalar(sa.text(named), {"name": application})
                    break
            time.sleep(0.2)
        else:
            process.kill()
            _, stderr = process.communicate(timeout=30)
            pytest.fail(f"the worker did not start (exit {process.returncode}): {stderr}")
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 0, stderr
        assert "Traceback" not in stderr
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=30)
        engine.dispose()


def test_a_worker_that_cannot_start_says_why_in_one_line(tmp_path: Path, schema: str) -> None:
    missing = f"{schema}_missing"
    cases = {
        "not a database URL": POSTGRES_URL.replace(":5432/", ":not-a-port/"),
        "no server there": f"postgresql+psycopg://postgres@/test?host={tmp_path}",
        f"no schema of its search path ({missing}) exists": with_options(
            f"-csearch_path%3D{missing}"
        ),
    }
    for reason, url in cases.items():
        ran = subprocess.run(
            worker_command(write_config(tmp_path, url)),
            cwd=ROOT,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ran.returncode != 0, (url, ran.stderr)
        [line] = ran.stderr.splitlines()
        assert line.startswith("syndicate: ") and "Traceback" not in ran.stderr, line
        if reason != "no server there":  # libpq's own words name the socket
            assert reason in line
