"""How the tests get a fresh store of this backend: a new SQLite file per test."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    """MEMORY_URL of an empty store that only this test uses."""
    return f"sqlite:///{tmp_path / 'memory.db'}"  # tmp_path is absolute: four slashes
