"""Kit-level fixtures."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests import postgres_server as server


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The URL of the PostgreSQL server that projects generated with
    memory_backend=postgres test against (MEMORY_TEST_POSTGRES_URL, default the local
    one), started for the session if none answers (tests/postgres_server.py). Without
    one the test is skipped with the reason; with MEMORY_REQUIRE_POSTGRES=1 (CI) it
    fails instead."""
    url = server.test_server_url()
    with server.running(url) as missing:
        if missing:
            if os.environ.get("MEMORY_REQUIRE_POSTGRES") == "1":
                pytest.fail(f"{missing}, and MEMORY_REQUIRE_POSTGRES=1")
            pytest.skip(missing)
        yield url
