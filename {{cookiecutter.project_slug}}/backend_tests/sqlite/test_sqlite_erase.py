"""Forget erases: after a fact, a call or everything of a caller is forgotten (or
purged by age), the forgotten words are in no file the SQLite store writes (the
database, its -wal and -shm files), byte for byte; other callers keep theirs."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest

import memory
from memory import sqlite_erase, sqlite_index, sqlite_queries, sqlite_store
from tests.doubles import make_exchange

ALICE = "alice@example.com"
BOB = "+15550100200"
KEPT = "bobkeepsmarimba"


def copies(db: Path, word: str) -> int:
    """How many times ``word`` is in the bytes of the database and its companions.
    Counted by its first 11 letters: the search index holds the word's stem (FTS5's
    porter stemmer: "...everything" is "...everyth"), not the word as said."""
    files = [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]
    return sum(f.read_bytes().count(word[:11].encode()) for f in files if f.exists())


def other_callers(db: Path, count: int) -> None:
    """``count`` exchanges of other callers in one transaction (one large index
    segment, as a file in use for a while has), written the way the store writes."""
    conn = sqlite3.connect(db, isolation_level=None)
    sqlite_store.add_functions(conn)  # what the index's triggers compute words with
    conn.execute("BEGIN")
    for n in range(count):
        text = f"caller {n} talks about trains, weather and the number {n}"
        sqlite_queries.save(conn, make_exchange(n, caller=f"other-{n % 97}", text=text))
    conn.execute("COMMIT")
    conn.close()


async def fill(store: memory.MemoryStore, forgotten: str, what: str) -> None:
    await store.save(
        make_exchange(1000, caller=BOB, text=f"my instrument is the {KEPT}")
    )
    await store.remember(BOB, memory.Fact.of("instrument", KEPT))
    await store.save_summary(BOB, "call-b", f"talked about the {KEPT}")
    # Alice: the forgotten word only where `what` forgets, her other words elsewhere.
    in_call = forgotten if what in ("call", "everything") else "plainwords"
    in_fact = forgotten if what in ("fact", "everything") else "plainwords"
    for n in range(3):
        await store.save(
            make_exchange(2000 + n, text=f"the code is {in_call} {n}", call_id="x")
        )
        await store.save(
            make_exchange(3000 + n, text=f"alice keeps this {n}", call_id="y")
        )
    await store.save_summary(ALICE, "x", f"the caller gave the code {in_call}")
    await store.remember(ALICE, memory.Fact.of("code word", in_fact))
    # Edits leave older versions of pages behind: the fact changes, a reply is added.
    await store.remember(ALICE, memory.Fact.of("code word", in_fact + " again"))
    await store.save(
        make_exchange(2000, text=f"the code is {in_call} 0", call_id="x", reply="ok!")
    )


@pytest.mark.parametrize("what", ["fact", "call", "everything"])
async def test_forgotten_words_are_in_no_file_the_store_writes(store_url, what):
    db = sqlite_store.path_of(store_url)
    forgotten = f"zebraquokka{what}"
    store = memory.open_store(store_url)
    other_callers(db, 5_000)
    # another worker process has the file open, so -wal and -shm stay on disk
    other_worker = sqlite3.connect(db)
    other_worker.execute("SELECT count(*) FROM facts").fetchall()
    try:
        await fill(store, forgotten, what)
        assert copies(db, forgotten) > 0 and copies(db, KEPT) > 0
        # SQLite checkpoints by itself every 1000 pages: the words are in the database
        other_worker.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        if what == "fact":
            # the value and the one it replaced (kept as history)
            assert await store.forget(ALICE, kind="code_word") == 2
        elif what == "call":
            assert await store.forget(ALICE, call_id="x") == 4
        else:
            assert await store.forget(ALICE) == 9
        await store.close()  # waits for the erasure queued after the delete
        assert copies(db, forgotten) == 0
        assert copies(db, KEPT) > 0
    finally:
        other_worker.close()
    assert copies(db, forgotten) == 0

    again = memory.open_store(store_url)
    try:
        bob = await again.recall(BOB, f"which {KEPT}?")
        assert [e.user_text for e in bob.exchanges] == [f"my instrument is the {KEPT}"]
        assert [f.value for f in bob.facts] == [KEPT] and len(bob.summaries) == 1
        kept_by_alice = [e.user_text for e in await again.exchanges(ALICE)]
        assert ("alice keeps this 0" in kept_by_alice) == (what != "everything")
    finally:
        await again.close()


async def test_exchanges_purged_by_age_are_erased_too(store_url):
    db = sqlite_store.path_of(store_url)
    store = memory.open_store(store_url)
    other_callers(db, 5_000)
    await store.save(make_exchange(1, text="an old zebraquokkapurge", at=1000.0))
    await store.save(make_exchange(2, caller=BOB, text=f"a new {KEPT}"))
    assert await store.purge(before=time.time() - 86_400, what="exchanges") == 1
    await store.close()
    assert copies(db, "zebraquokkapurge") == 0 and copies(db, KEPT) > 0


async def test_the_erasure_after_a_forget_lets_other_writers_in_between_its_steps(
    store_url, monkeypatch
):
    # The index merge that erases a forgotten caller's words once took the write lock
    # for the whole index (21 to 26 s at 1M exchanges), and other processes' saves
    # timed out. Now it runs in bounded steps, each its own transaction: another
    # process writes between any two of them at once (a busy timeout of 0), a save
    # of this process queued meanwhile runs before the erasure is done, and the
    # forgotten words still leave the file.
    db = sqlite_store.path_of(store_url)
    store = memory.open_store(store_url)
    other_callers(db, 5_000)
    await store.save(make_exchange(1, text="the code is zebraquokkasteps"))
    other_worker = sqlite3.connect(db, timeout=0, check_same_thread=False)
    sqlite_store.add_functions(other_worker)
    other_worker.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    events: list[str] = []
    step = sqlite_erase.erase_step

    def one_step(conn: sqlite3.Connection, restart: bool) -> bool:
        more = step(conn, restart)
        events.append("step")
        n = len(events)  # another worker process writes between two steps
        other_worker.execute("BEGIN IMMEDIATE")
        sqlite_queries.save(other_worker, make_exchange(9000 + n, caller=BOB))
        other_worker.execute("COMMIT")
        return more

    save = sqlite_queries.save

    def saved(conn: sqlite3.Connection, e: memory.Exchange) -> None:
        save(conn, e)
        events.append("save")

    monkeypatch.setattr(sqlite_erase, "ERASE_STEP_PAGES", 2)
    monkeypatch.setattr(sqlite_erase, "erase_step", one_step)
    monkeypatch.setattr(sqlite_queries, "save", saved)
    try:
        assert await store.forget(ALICE) == 1
        await store.save(make_exchange(2, caller=BOB, text=f"my {KEPT}"))
        await store.close()
    finally:
        other_worker.close()
    assert events.count("step") > 10  # many steps, not one long one
    assert events.index("save") < len(events) - 1 - events[::-1].index("step")
    assert copies(db, "zebraquokkasteps") == 0 and copies(db, KEPT) > 0
    conn = sqlite3.connect(db)
    writes = conn.execute("SELECT count(*) FROM exchanges WHERE caller_id = ?", (BOB,))
    assert writes.fetchone()[0] == events.count("step") + 1
    conn.execute("INSERT INTO turns_fts (turns_fts) VALUES ('integrity-check')")
    conn.close()


def _index(db: Path) -> set[tuple[str, int, str, int]]:
    # every (term, turn row, column, position) the turn index holds, as FTS5 reads it
    conn = sqlite3.connect(db)
    conn.execute(
        "CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, turns_fts, instance)"
    )
    rows = set(conn.execute("SELECT term, doc, col, offset FROM temp.v"))
    conn.close()
    return rows


def _rebuilt(db: Path, copy: Path) -> set[tuple[str, int, str, int]]:
    # the same file's index built afresh from the exchanges it stores
    source = sqlite3.connect(db)
    target = sqlite3.connect(copy, isolation_level=None)
    source.backup(target)
    source.close()
    sqlite_store.add_functions(target)
    target.execute("INSERT INTO turns_fts (turns_fts) VALUES ('delete-all')")
    sqlite_store.index_turns(target)
    target.close()
    return _index(copy)


async def test_the_turn_index_holds_exactly_the_stored_exchanges_words_after_every_change(
    store_url, tmp_path
):
    # The index keeps no copy of what it indexes (schema 8): FTS5 deletes a turn only
    # when given the words it was indexed with, which the triggers compute again from
    # the exchange and the one before it in the call (its context). A wrong guess
    # would leave a deleted turn's words in the index, found by searches and kept
    # in the file; so after each kind of change the index must equal one built
    # afresh from what is stored.
    db = sqlite_store.path_of(store_url)
    store = memory.open_store(store_url)
    checks: list[str] = []

    async def check(step: str) -> None:
        await store.exchanges(ALICE)  # the writes before it are done
        assert _index(db) == _rebuilt(db, tmp_path / f"{step}.db"), step
        checks.append(step)

    try:
        for n in range(6):  # two calls of Alice's, Bob's call between her turns
            await store.save(
                make_exchange(
                    n,
                    text=f"alice turn {n} about kayaks",
                    at=1000.0 + n,
                    call_id=f"a{n // 3}",
                    reply=f"reply {n} on paddles",
                )
            )
            await store.save(
                make_exchange(
                    100 + n, caller=BOB, text=f"bob {n} marimba", at=1000.5 + n
                )
            )
        await store.save(make_exchange(50, text="said late", at=1002.5, call_id="a0"))
        await store.save(
            make_exchange(51, text="no reply words", reply="!!", at=1007.0)
        )
        await check("saved")
        await store.save(  # a newer version of the exchange others have as context
            make_exchange(
                2,
                text="alice turn 2 about canoes",
                at=1002.0,
                call_id="a0",
                reply="a new reply",
            )
        )
        await check("changed")
        assert await store.purge(before=1001.9, what="exchanges") == 4
        await check("purged")
        assert await store.forget(ALICE, call_id="a1") == 3
        await check("call forgotten")
        assert await store.forget(BOB) == 4
        await check("caller forgotten")
        assert await store.forget(ALICE) == 3  # a reply without words among them
        await check("everyone forgotten")
    finally:
        await store.close()
    assert len(checks) == 6 and _index(db) == set()


async def test_an_erasure_that_finds_another_process_holding_the_lock_waits_its_turn(
    store_url, monkeypatch
):
    # Another worker holds the write lock past this store's busy timeout while the
    # erasure's steps run: a step refused that way is tried again, and the
    # forgotten words still leave the file once the lock is free.
    db = sqlite_store.path_of(store_url)
    store = sqlite_store.SQLiteStore(db, busy_timeout=0.05)
    await store.stats()  # the file made
    other_callers(db, 500)
    await store.save(make_exchange(1, text="the code is zebraquokkalocked"))
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    tries: list[bool] = []
    step = sqlite_erase.erase_step

    def held_step(conn: sqlite3.Connection, restart: bool) -> bool:
        tries.append(restart)
        if len(tries) == 1:
            holder.execute("BEGIN IMMEDIATE")  # another process's long write
        if len(tries) == 3:
            holder.execute("COMMIT")
        return step(conn, restart)

    monkeypatch.setattr(sqlite_erase, "erase_step", held_step)
    try:
        assert await store.forget(ALICE) == 1
        await store.close()
    finally:
        holder.close()
    assert tries[:3] == [True, True, True]  # the refused first step, made again
    assert copies(db, "zebraquokkalocked") == 0


async def test_saves_written_together_keep_their_order_around_a_forget(store_url):
    # Saves asked for while the writer is busy are written in one transaction; one
    # asked for before a forget is still written before it (and forgotten), one
    # asked for after it is written after it (and kept), whatever the batches.
    store = memory.open_store(store_url)
    now, later = time.time(), time.time() + 60
    try:
        await asyncio.gather(
            *(
                store.save(make_exchange(n, text=f"before {n}", at=now))
                for n in range(5)
            ),
            store.forget(ALICE),
            # said after the forget: an exchange said before it is not kept
            *(
                store.save(make_exchange(10 + n, text=f"after {n}", at=later + n))
                for n in range(3)
            ),
            *(store.save(make_exchange(20 + n, caller=BOB)) for n in range(3)),
        )
        kept = [e.user_text for e in await store.exchanges(ALICE)]
        assert kept == ["after 0", "after 1", "after 2"]
        assert len(await store.exchanges(BOB)) == 3
    finally:
        await store.close()


def test_the_words_the_index_triggers_compute_are_the_search_words_of_the_text():
    # memory_words (sqlite_index) builds indexed_words' string its own faster way:
    # what is indexed must stay what the search looks for, in every script.
    conn = sqlite3.connect(":memory:")
    sqlite_store.add_functions(conn)
    for caller, text in [
        (ALICE, "We went hiking in the Alps, twice!"),
        (BOB, "我上海出差的事情"),
        (BOB, "เชียงใหม่ and Café Zürich"),
        (ALICE, "!!"),
        (ALICE, ""),
    ]:
        (got,) = conn.execute("SELECT memory_words(?, ?)", (caller, text)).fetchone()
        assert got == sqlite_store.indexed_words(caller, text), text
    conn.close()


async def test_a_forget_computes_each_forgotten_texts_words_once(tmp_path):
    # Its two statements (one per side) computed every exchange's words twice: a
    # third of a 10,000-exchange caller's forget (benchmarks/writes.py).
    db = tmp_path / "memory.db"
    await memory.open_store(f"sqlite:///{db}").close()  # the schema
    conn = sqlite3.connect(db, isolation_level=None)
    sqlite_store.add_functions(conn)
    texts = 600  # past the words cache's 256 entries
    for n in range(texts // 2):
        sqlite_queries.save(
            conn, make_exchange(n, caller=ALICE, text=f"turn {n}", reply=f"reply {n}")
        )
    cache = sqlite_index._indexed_words
    cache.cache_clear()
    assert sqlite_queries.forget(conn, ALICE, None, None, None) == texts // 2
    assert cache.cache_info().misses <= texts + 1  # and the day's words
    conn.close()
