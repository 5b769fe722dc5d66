"""The spool on the PostgreSQL backend (memory/spool.py), with real processes and
a real server: what a call handed to memory survives a store that refused it for
the whole call and the worker's SIGKILL, and the next worker delivers it once; an
erasure in between reaches it; ten calls ending at once with 200 exchanges waiting
each lose none, whether the store takes them in time or not."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator

import psycopg
import pytest

import memory
from memory import postgres_pool, postgres_store
from tests.spool_worker import (
    a_killed_call_reaches_the_store_through_the_next_worker,
    an_erasure_after_the_kill_stops_that_callers_exchanges_only,
)
from tests.store_fixtures import own_schema, server_or_skip


@pytest.fixture
def unready_url(tmp_path, monkeypatch):
    """A store whose schema is not there yet (it refuses every write until
    ``upgrade``), with a data folder (its spool's) of the test's own."""
    monkeypatch.setenv("MEMORY_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(postgres_pool, "RECHECK_AFTER", 0.2)
    with own_schema(upgraded=False) as url:
        yield url


def stored(url: str, caller_id: str) -> list[tuple[str, str]]:
    """(key, user_text) of the caller's exchanges on the server, read directly."""
    schema = postgres_store.Target(url).schema
    with psycopg.connect(server_or_skip()) as conn:
        return conn.execute(
            f"SELECT key, user_text FROM {schema}.exchanges WHERE caller_id = %s"
            " ORDER BY key",
            (caller_id,),
        ).fetchall()


@contextlib.asynccontextmanager
async def refusing(url: str) -> AsyncIterator[None]:
    """The store has no schema (every write refused) until this exits: then the
    operator runs the upgrade."""
    yield
    postgres_store.upgrade(url)  # the store takes writes from now on


async def test_a_call_the_store_refused_throughout_then_killed_reaches_it_through_the_next_worker(
    unready_url,
):
    await a_killed_call_reaches_the_store_through_the_next_worker(
        unready_url, lambda: refusing(unready_url), lambda c: stored(unready_url, c)
    )


async def test_an_erasure_after_the_kill_stops_that_callers_spooled_exchanges_only(
    unready_url,
):
    await an_erasure_after_the_kill_stops_that_callers_exchanges_only(
        unready_url,
        lambda: refusing(unready_url),
        lambda c: stored(unready_url, c),
        "marjoram",
    )


def ten_calls_with_200_waiting(store: memory.MemoryStore) -> list[memory.CallMemory]:
    calls = [memory.CallMemory(store, f"caller-{c}", f"call-{c}") for c in range(10)]
    for c, call in enumerate(calls):
        for n in range(200):
            at = 1000.0 + n
            call.capture(
                "user", f"u{n}", f"caller {c} turn {n} about rye", created_at=at
            )
            call.capture("assistant", f"r{n}", f"reply {n}", created_at=at + 0.5)
    return calls


async def test_ten_calls_ending_at_once_with_200_exchanges_waiting_each_lose_none(
    unready_url,
):
    # A backlog after an outage: the store refused everything during the calls; it
    # is back, but its exchanges table is locked past the calls' end (a long
    # migration, a stuck transaction), so nothing can be saved within the bound.
    store = memory.open_store(unready_url)
    calls = ten_calls_with_200_waiting(store)
    await asyncio.gather(*(c.writer.drain() for c in calls))
    postgres_store.upgrade(unready_url)
    schema = postgres_store.Target(unready_url).schema
    locked, release = threading.Event(), threading.Event()

    def hold_the_table() -> None:
        with psycopg.connect(server_or_skip()) as conn:
            conn.execute(f"LOCK TABLE {schema}.exchanges IN EXCLUSIVE MODE")
            locked.set()
            release.wait(60)

    holder = threading.Thread(target=hold_the_table)
    holder.start()
    try:
        assert await asyncio.to_thread(locked.wait, 10)
        unsaved = await asyncio.gather(*(c.aclose("shutdown") for c in calls))
    finally:
        release.set()
        holder.join()
    assert unsaved == [0] * 10  # none lost: what the store did not take is spooled
    await store.flush(30)
    for c in range(10):
        assert len(stored(unready_url, f"caller-{c}")) == 200
    await store.close()
