"""Kit-level fixtures and hooks."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import postgres_server as server
import pytest

_MISSING = "KIT_POSTGRES_MISSING"  # why no server could be had ("" when one answers)

# Projects of other shapes that tests copy and check with their own settings
# (tests/fixtures/starter: LiveKit's starter layout, tests/test_existing_agent.py).
collect_ignore = ["fixtures"]


def pytest_configure(config: pytest.Config) -> None:
    """Make sure a PostgreSQL server answers for the whole run (tests/postgres_server.py),
    in the controlling process only: with pytest-xdist the workers inherit it, and it is
    stopped once every worker is done."""
    if hasattr(config, "workerinput"):
        return
    stack = contextlib.ExitStack()
    os.environ[_MISSING] = stack.enter_context(server.running(server.test_server_url())) or ""
    config.add_cleanup(stack.close)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The URL of the PostgreSQL server that projects generated with
    memory_backend=postgres test against (MEMORY_TEST_POSTGRES_URL, default the local
    one). Without one the test is skipped with the reason; with MEMORY_REQUIRE_POSTGRES=1
    (CI) it fails instead."""
    missing = os.environ.get(_MISSING, "")
    if missing:
        if os.environ.get("MEMORY_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"{missing}, and MEMORY_REQUIRE_POSTGRES=1")
        pytest.skip(missing)
    yield server.test_server_url()
