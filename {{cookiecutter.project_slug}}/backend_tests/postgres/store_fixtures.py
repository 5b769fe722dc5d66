"""How the tests get a fresh store of this backend: a schema of its own, upgraded to
the current version, on the PostgreSQL server that ``MEMORY_TEST_POSTGRES_URL`` names
(default: the local one), dropped after the test. Tests and test runs never see each
other's rows.

No server: the tests that need one are skipped with the reason, unless
``MEMORY_REQUIRE_POSTGRES=1`` (set in CI), where they fail instead."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from memory import postgres_store

SERVER_URL = (
    os.environ.get("MEMORY_TEST_POSTGRES_URL")
    or "postgresql://postgres@127.0.0.1:5432/test"
)


def server_or_skip() -> str:
    """The test server's URL, once it has answered; skips (or fails, in CI) if not."""
    try:
        with psycopg.connect(SERVER_URL, connect_timeout=3):
            return SERVER_URL
    except psycopg.Error as exc:
        reason = (
            f"no PostgreSQL server at {SERVER_URL} ({str(exc).strip().splitlines()[0]})"
        )
        if os.environ.get("MEMORY_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"{reason}, and MEMORY_REQUIRE_POSTGRES=1")
        pytest.skip(reason)


def with_params(url: str, **params: str) -> str:
    """``url`` with query parameters added (schema=..., tenant=...)."""
    return (
        url
        + ("&" if "?" in url else "?")
        + "&".join(f"{k}={v}" for k, v in params.items())
    )


@contextlib.contextmanager
def own_schema(*, upgraded: bool) -> Iterator[str]:
    """The URL of a schema of its own (created and upgraded, or only named); dropped
    with everything in it afterwards."""
    server = server_or_skip()
    schema = f"test_{os.getpid()}_{uuid.uuid4().hex[:10]}"
    url = with_params(server, schema=schema)
    try:
        if upgraded:
            postgres_store.upgrade(url)
        yield url
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.fixture
def store_url(tmp_path, monkeypatch) -> Iterator[str]:
    """MEMORY_URL of an empty store that only this test uses; its spool (the data
    folder's, memory/spool.py) is the test's too."""
    monkeypatch.setenv("MEMORY_DATA_DIR", str(tmp_path / "data"))
    with own_schema(upgraded=True) as url:
        yield url
