"""The SQL of each SQLite store operation, on one connection: the writes (run on the
store's writer thread; one transaction each where a write reads first) and the reads
(on a reader thread). ``SQLiteStore`` says when each runs and how long it may take;
``MemoryStore`` what each promises.
"""

from __future__ import annotations

import json
import sqlite3

from .dates import date_words
from .facts import Fact, Remembered, matching_facts, reconcile
from .limits import RECENT_SUMMARIES
from .records import Exchange, Recall, Summary
from .sqlite_file import rollback
from .sqlite_search import (
    caller_key,
    indexed_words,
    row_to_exchange,
    search,
    search_terms,
    turn_order,
)
from .store import PURGEABLE
from .words import whose_turns

FACT = "kind, value, updated_at, learned_at, replaced_at"


LATEST_SUMMARIES = """SELECT call_id, text, created_at FROM summaries WHERE caller_id = ?
    ORDER BY created_at DESC LIMIT ?"""
"""The caller's newest call summaries, read from the summaries_by_time index: without
it every recall sorted all of a caller's summaries to take 3 (a caller with 10,000
exchanges has hundreds; 0.1 ms of each recall for 1,000)."""


# -- writes, on the writer thread -----------------------------------------------------


def save(conn: sqlite3.Connection, e: Exchange) -> None:
    conn.execute(
        """INSERT INTO exchanges (key, caller_id, caller_key, call_id, user_text,
                                  assistant_text, interrupted, item_ids, created_at,
                                  user_words, reply_words, day_words)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT (key) DO UPDATE SET
               user_text = excluded.user_text,
               assistant_text = excluded.assistant_text,
               interrupted = excluded.interrupted,
               item_ids = excluded.item_ids,
               user_words = excluded.user_words,
               reply_words = excluded.reply_words
           WHERE user_text IS NOT excluded.user_text
              OR assistant_text IS NOT excluded.assistant_text
              OR interrupted IS NOT excluded.interrupted
              OR item_ids IS NOT excluded.item_ids""",
        (
            e.key,
            e.caller_id,
            caller_key(e.caller_id),
            e.call_id,
            e.user_text,
            e.assistant_text,
            int(e.interrupted),
            json.dumps(list(e.item_ids)),
            e.created_at,
            indexed_words(e.caller_id, e.user_text),
            indexed_words(e.caller_id, e.assistant_text),
            indexed_words(e.caller_id, date_words(e.created_at)),
        ),
    )


def remember(conn: sqlite3.Connection, caller_id: str, f: Fact) -> Remembered:
    # Read and write in one transaction: BEGIN IMMEDIATE holds the write lock, so
    # another process cannot add a value between the read and the write.
    conn.execute("BEGIN IMMEDIATE")
    try:
        held = {
            r["rowid"]: row_to_fact(r)
            for r in conn.execute(
                f"SELECT rowid, {FACT} FROM facts "
                "WHERE caller_id = ? AND kind = ? AND replaced_at IS NULL",
                (caller_id, f.kind),
            )
        }
        change = reconcile(list(held.values()), f)
        rowid = {fact: n for n, fact in held.items()}
        for old in change.retire:
            conn.execute(
                "UPDATE facts SET replaced_at = ? WHERE rowid = ?",
                (f.updated_at, rowid[old]),
            )
        if change.confirm is not None:
            same = next(n for n, h in held.items() if h.value == change.confirm.value)
            conn.execute(
                "UPDATE facts SET updated_at = ? WHERE rowid = ?",
                (change.confirm.updated_at, same),
            )
        if change.add is not None:
            a = change.add
            conn.execute(
                "INSERT INTO facts (caller_id, kind, value, learned_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (caller_id, a.kind, a.value, a.learned_at, a.updated_at),
            )
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        raise
    return change.remembered


def save_summary(
    conn: sqlite3.Connection, caller_id: str, call_id: str, text: str, at: float
) -> None:
    conn.execute(
        """INSERT INTO summaries (caller_id, call_id, text, created_at) VALUES (?, ?, ?, ?)
           ON CONFLICT (caller_id, call_id) DO UPDATE SET text = excluded.text""",
        (caller_id, call_id, text, at),
    )


def forget(
    conn: sqlite3.Connection,
    caller_id: str,
    kind: str | None,
    value: str | None,
    call_id: str | None,
) -> int:
    conn.execute("BEGIN IMMEDIATE")
    try:
        if kind is not None:
            deletes: list[tuple[str, str, tuple[str, ...]]] = [
                ("facts", "kind = ?", (kind,))
            ]
            if value is not None:  # the matching values only (matching_facts)
                rows = conn.execute(
                    f"SELECT {FACT} FROM facts WHERE caller_id = ? AND kind = ?",
                    (caller_id, kind),
                )
                found = matching_facts([row_to_fact(r) for r in rows], kind, value)
                deletes = [
                    ("facts", "kind = ? AND value = ?", (kind, v))
                    for v in {f.value for f in found}
                ]
        elif call_id is not None:
            deletes = [
                ("summaries", "call_id = ?", (call_id,)),
                ("exchanges", "call_id = ?", (call_id,)),
            ]
        else:
            deletes = [
                ("facts", "1", ()),
                ("summaries", "1", ()),
                ("exchanges", "1", ()),
            ]
        n = 0
        for table, where, args in deletes:
            sql = f"DELETE FROM {table} WHERE caller_id = ? AND {where}"
            n += conn.execute(sql, (caller_id, *args)).rowcount
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        raise
    return n


def purge(conn: sqlite3.Connection, what: str, before: float) -> int:
    column = "updated_at" if what == "facts" else "created_at"
    return conn.execute(f"DELETE FROM {what} WHERE {column} < ?", (before,)).rowcount


def erase(conn: sqlite3.Connection, index: bool) -> None:
    """Remove the bytes of rows already deleted from every file the store writes.

    secure_delete (set on every connection) zeroes a deleted row where it lay, but
    FTS5 keeps the words of deleted exchanges in its index segments until they are
    merged (SQLite 3.40 has no FTS5 secure-delete option), and the WAL file holds
    earlier versions of every changed page until a checkpoint. So: 'optimize' (one
    merge of the whole index: the old segments are freed, and zeroed) and a TRUNCATE
    checkpoint (pages back into the database, the WAL cut to zero bytes).

    Cost: 'optimize' rewrites the whole search index, about 19 ms per 1,000 stored
    exchanges (measured with the two indexes of schemas 4 to 6; schema 7 has one),
    holding the write lock (other writers wait, up to their busy timeout, then
    retry); the checkpoint waits for readers in other processes up to the busy
    timeout (``sqlite_store.BUSY_TIMEOUT``). 0 copies of a forgotten word are left
    (tests/test_sqlite_erase.py; benchmarks/forget_erase.py in the kit has the
    figures and why each step is needed)."""
    if index:
        conn.execute("INSERT INTO turns_fts (turns_fts) VALUES ('optimize')")
    busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
    if busy:
        raise sqlite3.OperationalError(
            "a reader held the WAL past the busy timeout; forgotten rows' earlier page "
            "versions stay in the -wal file until the next checkpoint"
        )


# -- reads, on a reader thread --------------------------------------------------------


def recall(
    conn: sqlite3.Connection,
    caller_id: str,
    query: str,
    exclude_call_id: str | None,
    limit: int,
) -> Recall:
    facts = tuple(
        row_to_fact(r)
        for r in conn.execute(
            f"SELECT {FACT} FROM facts WHERE caller_id = ? AND replaced_at IS NULL "
            "ORDER BY updated_at DESC, rowid DESC",
            (caller_id,),
        )
    )
    summaries = tuple(
        Summary(r["call_id"], r["text"], r["created_at"])
        for r in conn.execute(
            LATEST_SUMMARIES,
            (caller_id, RECENT_SUMMARIES),
        )
    )
    match, floor = search_terms(conn, query, caller_id) if limit else (None, 0)
    # a question about the caller's own words or the agent's ranks that side up;
    # the caller's name, when on file, counts as "I"
    names = [f.value for f in facts if f.kind in ("name", "preferred_name")]
    order = turn_order(whose_turns(query, names))
    exchanges, sides = (
        search(conn, caller_id, match, floor, exclude_call_id, limit, order)
        if match
        else ((), ())
    )
    return Recall(facts, summaries, exchanges, sides)


def history(conn: sqlite3.Connection, caller_id: str) -> list[Fact]:
    rows = conn.execute(
        f"SELECT {FACT} FROM facts WHERE caller_id = ? AND replaced_at IS NOT NULL "
        "ORDER BY replaced_at DESC, rowid DESC",
        (caller_id,),
    )
    return [row_to_fact(r) for r in rows]


def exchanges(
    conn: sqlite3.Connection, caller_id: str, call_id: str | None
) -> list[Exchange]:
    rows = conn.execute(
        "SELECT * FROM exchanges WHERE caller_id = ? AND (? IS NULL OR call_id = ?) "
        "ORDER BY created_at, rowid",
        (caller_id, call_id, call_id),
    )
    return [row_to_exchange(r) for r in rows]


def summaries(conn: sqlite3.Connection, caller_id: str) -> list[Summary]:
    rows = conn.execute(
        "SELECT call_id, text, created_at FROM summaries WHERE caller_id = ? "
        "ORDER BY created_at DESC",
        (caller_id,),
    )
    return [Summary(r["call_id"], r["text"], r["created_at"]) for r in rows]


def callers(conn: sqlite3.Connection, after: str, limit: int) -> list[str]:
    rows = conn.execute(
        """SELECT caller_id FROM (
               SELECT caller_id FROM exchanges UNION SELECT caller_id FROM facts
               UNION SELECT caller_id FROM summaries)
           WHERE caller_id > ? ORDER BY caller_id LIMIT ?""",
        (after, limit),
    )
    return [r[0] for r in rows]


def stats(conn: sqlite3.Connection) -> dict[str, int]:
    counts = {
        t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in PURGEABLE
    }
    counts["callers"] = conn.execute(
        """SELECT count(*) FROM (SELECT caller_id FROM exchanges UNION
           SELECT caller_id FROM facts UNION SELECT caller_id FROM summaries)"""
    ).fetchone()[0]
    return counts


def row_to_fact(r: sqlite3.Row) -> Fact:
    """A ``facts`` row (its ``FACT`` columns) as the Fact it holds."""
    return Fact(
        r["kind"], r["value"], r["updated_at"], r["learned_at"], r["replaced_at"]
    )
