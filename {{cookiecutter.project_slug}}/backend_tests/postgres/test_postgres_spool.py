"""The spool on the PostgreSQL backend (memory/spool.py), with real processes and
a real server: what a call handed to memory survives a store that refused it for
the whole call and the worker's SIGKILL, and the next worker delivers it once; an
erasure in between reaches it; ten calls ending at once with 200 exchanges waiting
each lose none, whether the store takes them in time or not."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest

import memory
from memory import postgres_pool, postgres_store
from tests.spool_worker import a_later_call, call_then_hang, caller_turns
from tests.store_fixtures import own_schema, server_or_skip

PROJECT = Path(__file__).resolve().parents[1]
ALICE, BOB = "alice@example.com", "+15550100200"
SPAWN = multiprocessing.get_context("spawn")


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


async def killed_while_the_store_refused(url: str, turns: list[str]) -> None:
    """A worker runs a call while the store has no schema (every write refused), and
    is killed with SIGKILL mid-call; then the operator runs the upgrade."""
    ready = SPAWN.Event()
    worker = SPAWN.Process(
        target=call_then_hang, args=(url, [ALICE, BOB], turns, ready, {})
    )
    worker.start()
    assert await asyncio.to_thread(ready.wait, 60)
    await asyncio.sleep(0.3)
    assert worker.pid is not None
    os.kill(worker.pid, signal.SIGKILL)
    worker.join(10)
    assert worker.exitcode == -signal.SIGKILL
    postgres_store.upgrade(url)  # the store takes writes from now on


def next_worker(url: str) -> None:
    later = SPAWN.Process(target=a_later_call, args=(url, {}))
    later.start()
    later.join(60)
    assert later.exitcode == 0


async def test_a_call_the_store_refused_throughout_then_killed_reaches_it_through_the_next_worker(
    unready_url,
):
    turns = caller_turns(6, "saffron")
    await killed_while_the_store_refused(unready_url, turns)
    next_worker(unready_url)
    for caller in (ALICE, BOB):
        keys = [memory.exchange_key(caller, f"user_{n}") for n in range(len(turns))]
        assert stored(unready_url, caller) == sorted(zip(keys, turns, strict=True))


async def test_an_erasure_after_the_kill_stops_that_callers_spooled_exchanges_only(
    unready_url,
):
    turns = caller_turns(6, "marjoram")
    await killed_while_the_store_refused(unready_url, turns)
    erased = subprocess.run(
        [sys.executable, "memory_admin.py", "forget", ALICE, "--yes"],
        cwd=PROJECT,
        env={**os.environ, "MEMORY_URL": unready_url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert erased.returncode == 0, erased.stderr
    next_worker(unready_url)
    assert stored(unready_url, ALICE) == []
    assert len(stored(unready_url, BOB)) == len(turns)  # only the erased caller's


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
