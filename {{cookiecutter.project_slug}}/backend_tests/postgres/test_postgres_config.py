"""Configuring the PostgreSQL backend as a new user does: a URL without a host, or
libpq's PG* variables alone (as the README says work)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest

import memory
from memory.postgres_schema import Target
from tests.doubles import make_exchange
from tests.store_fixtures import own_schema

ALICE = "alice@example.com"


@pytest.mark.parametrize(
    "url",
    ["postgresql://?schema={schema}", "postgresql:///{db}?schema={schema}"],
)
async def test_a_url_without_a_host_reaches_the_server_libpqs_variables_name(
    url, monkeypatch
):
    # The "//" was lost on the way to libpq, which then refused the URL with
    # 'missing "=" after "postgresql:"'.
    with own_schema(upgraded=True) as server_url:
        parts = urlsplit(server_url)
        schema = dict(parse_qsl(parts.query))["schema"]
        db = parts.path.lstrip("/")
        for name, value in (
            ("PGHOST", parts.hostname),
            ("PGPORT", str(parts.port or 5432)),
            ("PGUSER", parts.username),
            ("PGDATABASE", db),
        ):
            monkeypatch.setenv(name, value or "")
        store = memory.open_store(url.format(schema=schema, db=db))
        await store.save(make_exchange(1, ALICE, "the lantern festival"))
        assert [e.user_text for e in await store.exchanges(ALICE)] == [
            "the lantern festival"
        ]
        await store.close()


def test_a_url_without_a_host_stays_a_url_for_libpq():
    assert Target("postgresql:///app?schema=s").conninfo == "postgresql:///app"
    assert Target("postgresql://").conninfo == "postgresql://"


def test_the_demo_before_upgrade_says_to_run_upgrade_in_one_line():
    # It ended in a 571-line traceback.
    with own_schema(upgraded=False) as url:
        done = subprocess.run(
            [sys.executable, "demo.py", "--url", url],
            cwd=Path(__file__).resolve().parents[1],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    (said,) = [line for line in done.stderr.splitlines() if line.startswith("demo:")]
    assert "memory.postgres_store upgrade" in said
