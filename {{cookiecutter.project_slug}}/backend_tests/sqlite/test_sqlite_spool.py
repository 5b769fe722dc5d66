"""The spool on the SQLite backend (memory/spool.py), with real processes: what a
call handed to memory survives the store refusing writes for the whole call and the
worker's SIGKILL, and the next worker delivers it once; an erasure in between
reaches it. Also: a damaged spool fails open, retention and erasure reach it."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import memory
from memory import outbox, spool
from memory.sqlite_store import path_of
from tests.doubles import counting_syncs, make_exchange
from tests.spool_worker import (
    ALICE,
    a_killed_call_reaches_the_store_through_the_next_worker,
    an_erasure_after_the_kill_stops_that_callers_exchanges_only,
)


def stored(path: Path, caller_id: str) -> list[tuple[str, str]]:
    """(key, user_text) of the caller's exchanges in the memory file, read directly."""
    with sqlite3.connect(path) as conn:
        return conn.execute(
            "SELECT key, user_text FROM exchanges WHERE caller_id = ? ORDER BY key",
            (caller_id,),
        ).fetchall()


def hold_first_save(store, monkeypatch) -> tuple[asyncio.Event, asyncio.Event]:
    """The store behind ``store``'s spool takes the first exchange it is given only
    once ``go`` is set (``writing`` is set when it has it); later ones at once."""
    save = store.store.save
    writing, go = asyncio.Event(), asyncio.Event()

    async def held(exchange):
        if not writing.is_set():
            writing.set()
            await go.wait()
        await save(exchange)

    monkeypatch.setattr(store.store, "save", held)
    return writing, go


@contextlib.asynccontextmanager
async def refusing(store_url: str) -> AsyncIterator[None]:
    """Another process holds the memory file's write lock (every other writer
    waits, then fails) until this exits."""
    first = memory.open_store(store_url)  # the file, with its schema
    await first.close()
    lock = sqlite3.connect(path_of(store_url), isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        lock.execute("ROLLBACK")
        lock.close()


async def test_a_call_the_store_refused_throughout_then_killed_reaches_it_through_the_next_worker(
    store_url,
):
    path = path_of(store_url)
    await a_killed_call_reaches_the_store_through_the_next_worker(
        store_url, lambda: refusing(store_url), lambda c: stored(path, c)
    )


async def test_an_erasure_after_the_kill_stops_that_callers_spooled_exchanges_only(
    store_url,
):
    path = path_of(store_url)
    await an_erasure_after_the_kill_stops_that_callers_exchanges_only(
        store_url, lambda: refusing(store_url), lambda c: stored(path, c), "marjoram"
    )
    for name in (Path(f"{path}-spool"), Path(f"{path}-spool-wal")):
        if name.exists():
            assert b"marjoram" not in name.read_bytes(), name


async def test_a_damaged_spool_file_fails_open_with_one_error(store_url, caplog):
    path = path_of(store_url)
    path.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{path}-spool").write_bytes(b"not a database " * 512)
    with caplog.at_level(logging.ERROR, logger="memory"):
        store = memory.open_store(store_url)
        call = memory.CallMemory(store, ALICE, "call-1")
        call.capture("user", "user_1", "the spool is damaged", created_at=1000.0)
        call.capture("assistant", "reply_1", "Noted.", created_at=1000.5)
        assert await call.aclose() == 0
    assert [e.user_text for e in await store.exchanges(ALICE)] == [
        "the spool is damaged"
    ]
    await store.close()
    spool_errors = [r for r in caplog.records if "spool" in r.getMessage()]
    assert len(spool_errors) == 1 and spool_errors[0].levelno == logging.ERROR


async def test_a_memory_file_that_cannot_be_opened_keeps_the_calls_words_in_its_spool(
    store_url,
):
    # Measured before: with the memory file damaged, every worker ran its calls
    # without memory and their words went nowhere (the spool was not opened either).
    path = path_of(store_url)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"saved by another tool, not SQLite " * 200)
    store = memory.open_store(store_url, fail_open=True)
    call = memory.CallMemory(store, ALICE, "call-1")
    call.capture("user", "user_1", "my locker is number 12", created_at=1000.0)
    call.capture("assistant", "reply_1", "Noted.", created_at=1000.5)
    await call.aclose()
    await store.close()
    path.unlink()  # the operator moves the damaged file away
    mended = memory.open_store(store_url)
    assert await mended.flush(10.0) == 0
    stored = await mended.store.exchanges(ALICE)
    await mended.close()
    assert [e.user_text for e in stored] == ["my locker is number 12"]


async def test_a_full_spool_fails_open_the_store_takes_the_save(
    store_url, monkeypatch, caplog
):
    monkeypatch.setattr(outbox, "MAX_PENDING", 0)
    with caplog.at_level(logging.ERROR, logger="memory"):
        store = memory.open_store(store_url)
        for n in range(3):
            await store.save(make_exchange(n, text=f"full spool {n}"))
    assert len(await store.exchanges(ALICE)) == 3
    await store.close()
    full = [r for r in caplog.records if "is full" in r.getMessage()]
    assert len(full) == 1 and full[0].levelno == logging.ERROR


async def test_the_spool_keeps_nothing_past_the_retention_of_its_kind(
    store_url, monkeypatch
):
    store = memory.open_store(store_url)

    async def refused(exchange):
        raise memory.StoreUnavailableError("the store refuses writes")

    monkeypatch.setattr(store.store, "save", refused)
    old = make_exchange(1, text="an old spooled exchange", at=time.time() - 10 * 86400)
    await store.save(old)
    assert await store.flush(0.5) == 1  # it waits in the spool
    await memory.purge_expired(store, memory.Retention(exchanges_days=7))
    assert await store.exchanges(ALICE) == []  # neither stored nor spooled
    monkeypatch.undo()
    assert await store.flush(1.0) == 0
    assert await store.exchanges(ALICE) == []
    await store.close()


async def test_a_flush_returns_once_what_waits_in_the_spool_is_fsynced(
    store_url, monkeypatch
):
    synced = counting_syncs(monkeypatch)
    monkeypatch.setattr(spool, "SYNC_WINDOW", 60.0)  # no timed fsync in this test
    store = memory.open_store(store_url)

    async def refused(exchange):
        raise memory.StoreUnavailableError("the store refuses writes")

    monkeypatch.setattr(store.store, "save", refused)
    await store.save(make_exchange(1, text="my code is 4411"))
    assert synced == []  # committed: a killed worker would not lose it
    assert await store.flush(0.3) == 1  # it waits in the spool, on the disk now
    assert synced == [f"{path_of(store_url).name}-spool"]
    await store.close()


async def test_a_forget_while_a_save_is_written_through_leaves_nothing_of_it(
    store_url, monkeypatch
):
    # A forget of the call reaches the spool and the store while the store is
    # still taking the exchange; the write-through lands after it, reads the
    # forget's tombstone as it records its delivery, and forgets again (a
    # forget of the whole caller leaves a mark the store itself checks). Said
    # after, in the next call: kept.
    path = path_of(store_url)
    store = memory.open_store(store_url)
    writing, go = hold_first_save(store, monkeypatch)
    saving = asyncio.create_task(store.save(make_exchange(1, text="my pin is 4411")))
    await asyncio.wait_for(writing.wait(), 30)
    # the spooled row; the store had nothing yet
    assert await store.forget(ALICE, call_id="call-1") == 1
    go.set()
    await saving
    assert await store.flush(10.0) == 0
    assert stored(path, ALICE) == []
    after = make_exchange(2, text="call me on Tuesday", call_id="call-2")
    await store.save(after)
    assert await store.flush(10.0) == 0
    assert stored(path, ALICE) == [(after.key, "call me on Tuesday")]
    await store.close()


async def test_a_save_still_written_through_at_close_is_given_back_for_the_next_process(
    store_url, monkeypatch
):
    # The store has not answered a write-through when the close's bound runs out:
    # the close stops it and gives its row back, so the next process delivers it
    # at once instead of after the lease (outbox_ledger.LEASE, 30 s), and no task
    # of the closed store is left running.
    monkeypatch.setattr(spool, "CLOSE_TIMEOUT", 0.5)
    path = path_of(store_url)
    store = memory.open_store(store_url)
    writing, _ = hold_first_save(store, monkeypatch)  # never let go
    said = make_exchange(1, text="my locker is 4411")
    await store.save(said)  # on the disk; the store is still taking it
    assert writing.is_set()
    await store.close()
    assert not [t for t in asyncio.all_tasks() if t.get_name() == "memory-spool"]
    after = memory.open_store(store_url)
    assert await after.flush(5.0) == 0
    assert stored(path, ALICE) == [(said.key, "my locker is 4411")]
    await after.close()


async def test_a_forget_of_the_caller_meeting_a_write_through_keeps_what_is_said_after_it(
    store_url, monkeypatch
):
    # The write-through of an exchange said before the forget lands after it: the
    # store's own erasure mark skips it, and nothing forgets the whole caller
    # again (that moved the erasure's time on, and took what was said after the
    # forget: the adversarial pass lost 190-236 exchanges a run on PostgreSQL).
    path = path_of(store_url)
    store = memory.open_store(store_url)
    writing, go = hold_first_save(store, monkeypatch)
    saving = asyncio.create_task(store.save(make_exchange(1, text="before: pin 4411")))
    await asyncio.wait_for(writing.wait(), 30)
    assert await store.forget(ALICE) == 1
    await asyncio.sleep(0.01)  # said after the forget, by the wall clock
    after = make_exchange(2, text="after: call me on Tuesday", at=time.time())
    go.set()
    await saving
    assert await store.flush(10.0) == 0
    await store.save(after)
    assert await store.flush(10.0) == 0
    assert stored(path, ALICE) == [(after.key, "after: call me on Tuesday")]
    await store.close()


async def test_a_reply_that_joins_an_exchange_being_written_through_follows_it_at_once(
    store_url, monkeypatch
):
    # The caller's turn is being written through when the reply joins it: the newer
    # version waits behind the write-through's lease, and is delivered as soon as
    # that write-through is recorded, not when the lease (30 s) would run out.
    path = path_of(store_url)
    store = memory.open_store(store_url)
    writing, go = hold_first_save(store, monkeypatch)
    turn = make_exchange(1, text="my order is 4411", reply="", at=time.time())
    saving = asyncio.create_task(store.save(turn))
    await asyncio.wait_for(writing.wait(), 30)
    await store.save(dataclasses.replace(turn, assistant_text="Found it."))
    go.set()
    await saving
    for _ in range(50):  # 5 s: well under the lease
        if stored_replies(path, ALICE) == [(turn.key, "Found it.")]:
            break
        await asyncio.sleep(0.1)
    assert stored_replies(path, ALICE) == [(turn.key, "Found it.")]
    await store.close()


def stored_replies(path: Path, caller_id: str) -> list[tuple[str, str]]:
    """(key, assistant_text) of the caller's exchanges in the memory file."""
    with sqlite3.connect(path) as conn:
        return conn.execute(
            "SELECT key, assistant_text FROM exchanges WHERE caller_id = ? ORDER BY key",
            (caller_id,),
        ).fetchall()
