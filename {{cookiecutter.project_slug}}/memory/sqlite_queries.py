"""The SQL of each SQLite store operation, on one connection: the writes (run on the
store's writer thread; one transaction each where a write reads first) and the reads
(on a reader thread). ``SQLiteStore`` says when each runs and how long it may take;
``MemoryStore`` what each promises.
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import time
from datetime import tzinfo

from .dates import TIMEZONE_SETTING, date_words, zone_or_utc
from .facts import Fact, Remembered, matching_facts, reconcile
from .limits import RECENT_SUMMARIES
from .records import Exchange, Recall, Summary
from .sqlite_file import rollback
from .sqlite_index import FORGET_TURNS, PREVIOUS_IN_CALL
from .sqlite_search import row_to_exchange, search, search_terms, turn_order
from .store import PURGEABLE
from .words import whose_turns

FACT = "kind, value, updated_at, learned_at, replaced_at"


LATEST_SUMMARIES = """SELECT call_id, text, created_at FROM summaries WHERE caller_id = ?
    ORDER BY created_at DESC LIMIT ?"""
"""The caller's newest call summaries, read from the summaries_by_time index: without
it every recall sorted all of a caller's summaries to take 3 (a caller with 10,000
exchanges has hundreds; 0.1 ms of each recall for 1,000)."""


# -- writes, on the writer thread -----------------------------------------------------


SAVE = f"""INSERT INTO exchanges (key, caller_id, call_id, user_text, assistant_text,
                               interrupted, item_ids, created_at, day, context_of)
    VALUES (:key, :caller_id, :call_id, :user_text, :assistant_text, :interrupted,
            :item_ids, :created_at, :day,
            ({PREVIOUS_IN_CALL.format(e="x").replace("x.", ":")}))
    ON CONFLICT (key) DO UPDATE SET
        user_text = excluded.user_text,
        assistant_text = excluded.assistant_text,
        interrupted = excluded.interrupted,
        item_ids = excluded.item_ids
    WHERE user_text IS NOT excluded.user_text
       OR assistant_text IS NOT excluded.assistant_text
       OR interrupted IS NOT excluded.interrupted
       OR item_ids IS NOT excluded.item_ids"""
"""A save: the exchange's row (its turns indexed by the schema's triggers, with the
exchange before it in the call as context, ``PREVIOUS_IN_CALL``), or the newer
version of a row saved before."""


def save(conn: sqlite3.Connection, e: Exchange) -> None:
    conn.execute(
        SAVE,
        {
            "key": e.key,
            "caller_id": e.caller_id,
            "call_id": e.call_id,
            "user_text": e.user_text,
            "assistant_text": e.assistant_text,
            "interrupted": int(e.interrupted),
            "item_ids": json.dumps(list(e.item_ids)),
            "created_at": e.created_at,
            "day": date_words(e.created_at, _zone(*_zone_settings())),
        },
    )


def _zone_settings() -> tuple[str, str]:
    return os.getenv(TIMEZONE_SETTING, ""), os.getenv("TZ", "")


@functools.lru_cache(maxsize=8)
def _zone(setting: str, tz: str) -> tzinfo:
    # The deployment's zone, found once per setting: finding the machine's own zone
    # reads /etc/localtime's link (seven lstat calls), 19 % of a save's time.
    return zone_or_utc()


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
            mark_erased(conn, caller_id, time.time())
        n = 0
        for table, where, args in deletes:
            if table == "exchanges":  # and their turns, in bulk (FORGET_TURNS)
                scope = {"caller_id": caller_id, "call_id": call_id}
                for sql in FORGET_TURNS:
                    deleted = conn.execute(sql, scope).rowcount
                    n += deleted if sql.startswith("DELETE FROM exchanges") else 0
                continue
            sql = f"DELETE FROM {table} WHERE caller_id = ? AND {where}"
            n += conn.execute(sql, (caller_id, *args)).rowcount
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        raise
    return n


PURGE_BATCH = 500
"""Most rows one transaction of a purge deletes: a purge of months of exchanges
holds the write lock for a batch at a time, not for all of them (a purge need not
be atomic; a forget is)."""


def purge(conn: sqlite3.Connection, what: str, before: float) -> int:
    column = "updated_at" if what == "facts" else "created_at"
    if what != "exchanges":
        return conn.execute(
            f"DELETE FROM {what} WHERE {column} < ?", (before,)
        ).rowcount
    mark_erased(conn, "", before)  # a live call's older words are not saved after it
    n = 0
    while True:  # each batch a transaction of its own (autocommit)
        done = conn.execute(
            "DELETE FROM exchanges WHERE rowid IN (SELECT rowid FROM exchanges "
            f"WHERE created_at < ? LIMIT {PURGE_BATCH})",
            (before,),
        ).rowcount
        n += done
        if done < PURGE_BATCH:
            return n


def mark_erased(conn: sqlite3.Connection, caller_id: str, at: float) -> None:
    """Record that what ``caller_id`` ('' for every caller) said before ``at``
    (seconds since the epoch) is erased: the ``exchanges_erased`` trigger (schema
    9) then skips any save of an exchange created before it, and live calls read
    it (``erased_at``) before they save a summary or extracted facts."""
    conn.execute(
        "INSERT INTO erasures (caller_id, erased_at) VALUES (?, ?) ON CONFLICT "
        "(caller_id) DO UPDATE SET erased_at = max(erased_at, excluded.erased_at)",
        (caller_id, at),
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


def erased_at(conn: sqlite3.Connection, caller_id: str) -> float:
    row = conn.execute(
        "SELECT max(erased_at) FROM erasures WHERE caller_id IN (?, '')", (caller_id,)
    ).fetchone()
    return float(row[0] or 0.0)


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
