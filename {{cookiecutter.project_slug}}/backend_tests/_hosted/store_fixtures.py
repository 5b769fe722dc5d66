"""How the tests get a fresh store of this backend: a fake of the hosted service on
127.0.0.1 (tests/fake_<backend>.py, one per test) and an outbox file of its own.

The fake runs in a thread of the test process, so the real entrypoint's child
process (tests/livekit_job.py) reaches it through MEMORY_URL and the API key
variable, which this sets in the environment the child inherits."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import fake_service

# this project's backend: the one fake_<name>.py beside this file (the template's
# hook places the chosen backend's fake here)
BACKEND = next(
    p.stem.removeprefix("fake_")
    for p in Path(__file__).parent.glob("fake_*.py")
    if p.name != "fake_service.py"
)
FAKE: type[fake_service.FakeService] = importlib.import_module(
    f"tests.fake_{BACKEND}"
).FAKE
FAKE_LAG = 1.0
"""Seconds before a write is searchable at the fakes, in every test: the contract
suite passes only because recall merges the outbox with the service (real services
take seconds to minutes)."""


RUNNING: dict[str, fake_service.FakeService] = {}  # MEMORY_URL -> its fake


@pytest.fixture
def store_url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    """MEMORY_URL of an empty store that only this test uses: a fake of the service
    started for this test (with the write lag of FAKE_LAG) and a new outbox file."""
    service = FAKE(lag=FAKE_LAG).start()
    monkeypatch.setenv(service.key_env, fake_service.KEY)
    url = service.url(tmp_path / "outbox.db")
    RUNNING[url] = service
    yield url
    del RUNNING[url]
    service.stop()


@pytest.fixture(name="fake")
def running_fake(store_url: str) -> fake_service.FakeService:
    """``fake``: the running fake behind ``store_url``, to steer (faults, lag, limits)
    and inspect. Test modules import it as ``running_fake``."""
    return RUNNING[store_url]
