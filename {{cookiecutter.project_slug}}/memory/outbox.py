"""The outbox of the hosted memory backends: a small SQLite file on the worker.

Every write (exchange, fact, call summary, forget) of a hosted store (hosted.py) is
first written here (stdlib sqlite3, run on threads of its own by
``outbox_threads.OutboxThreads``, never on the event loop), then delivered to the
service in the background, oldest first. An outage, a storm of 5xx answers or a worker killed mid-call loses nothing: the rows
wait in the file, and the next process that opens it delivers them. Delivered rows
are marked and kept ``KEEP_DELIVERED`` seconds: they cover the service's write lag
(recall merges them with what the service returns), they are the idempotency ledger
(the service's ids of each item), and they answer what the services cannot (exact
exports, ``callers``, ``stats``, ``purge``). Forgotten items become tombstones that
hide what the service still returns until its delete is done.

``Outbox`` is the file: durable writes, the record, tombstones (what it holds is
``outbox_items``'s; the leases and outcomes of delivery ``outbox_ledger``'s; the
threads it runs on and the group commit ``outbox_threads``'s).

Units: seconds (times are seconds since the epoch unless said otherwise).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from . import outbox_erase, outbox_file
from .errors import StoreUnavailableError
from .outbox_items import KIND_OF, Item, Row, Tombstones

SETTLE = 1.0
"""Seconds an exchange without a reply waits before delivery, so the reply usually
joins it first (one write per exchange instead of two)."""
LAG_WINDOW = 600.0
"""Seconds after delivery during which recall still takes an exchange from the
outbox: the services make writes searchable seconds to minutes later."""
KEEP_DELIVERED = 30 * 86400.0
"""Seconds delivered rows are kept (this worker's record and idempotency ledger)."""
KEEP_TOMBSTONES = 7 * 86400.0
"""Seconds a forget is remembered, to hide what the service still returns while its
delete is queued or processed (Mem0 and Zep delete asynchronously)."""
MAX_PENDING = 10_000
"""Undelivered rows the outbox holds at most; past it saves fail (ExchangeWriter
keeps and retries them) and the log says so."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
    caller_id    TEXT NOT NULL,
    id           TEXT NOT NULL,
    kind         TEXT NOT NULL,            -- exchange | fact | summary
    call_id      TEXT NOT NULL,
    at           REAL NOT NULL,
    data         TEXT NOT NULL,            -- Item.data as JSON
    version      INTEGER NOT NULL DEFAULT 1,
    delivered    INTEGER NOT NULL DEFAULT 0, -- the version the service has (0: none)
    delivered_at REAL,
    remote       TEXT NOT NULL DEFAULT '{}', -- the service's ids: the idempotency ledger
    attempts     INTEGER NOT NULL DEFAULT 0,
    next_at      REAL NOT NULL DEFAULT 0,
    queued_at    REAL NOT NULL DEFAULT 0,  -- when this version was written here
    lease        TEXT,                     -- the process delivering it, until lease_until
    lease_until  REAL NOT NULL DEFAULT 0,
    rejected     INTEGER NOT NULL DEFAULT 0,
    error        TEXT,
    PRIMARY KEY (caller_id, id)
);
CREATE INDEX IF NOT EXISTS items_due ON items (next_at) WHERE delivered < version;
CREATE TABLE IF NOT EXISTS deletes (
    seq         INTEGER PRIMARY KEY,
    caller_id   TEXT NOT NULL,
    everything  INTEGER NOT NULL,          -- 1: the whole caller at the service
    items       TEXT NOT NULL,             -- [[item id, remote], ...]
    attempts    INTEGER NOT NULL DEFAULT 0,
    next_at     REAL NOT NULL DEFAULT 0,
    lease       TEXT,
    lease_until REAL NOT NULL DEFAULT 0,
    error       TEXT
);
CREATE TABLE IF NOT EXISTS tombstones (
    caller_id TEXT NOT NULL,
    item_id   TEXT,                        -- one item, or
    call_id   TEXT,                        -- one call, or (both NULL)
    before    REAL NOT NULL,               -- everything stored before this time
    at        REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS tombstones_by_caller ON tombstones (caller_id);
CREATE TABLE IF NOT EXISTS remote_ids (
    caller_id TEXT NOT NULL,
    name      TEXT NOT NULL,
    value     TEXT NOT NULL,
    PRIMARY KEY (caller_id, name)
);
"""
PENDING = "delivered < version AND rejected = 0"
ROW = (
    "caller_id, id, kind, call_id, at, data, remote, version, delivered, "
    "delivered_at, attempts"
)
"""The columns ``row_of`` reads, in its order."""


class Outbox:
    """The local SQLite file: durable writes, the record, tombstones.

    Synchronous and blocking: HostedStore calls the writes from one thread and the
    reads from others (each thread has its own connection; in WAL mode a read never
    waits for a write, so recall never queues behind delivery bookkeeping). Several
    worker processes may share the file: WAL, a busy timeout, and leases on rows
    being delivered (``outbox_ledger``). ``synchronous=FULL``: a row is on disk when
    ``put`` returns.

    ``keeps_record`` False (a local store's spool, spool.py): a delivered row is
    deleted at once (the store is the record), and deleted rows are overwritten
    (``secure_delete``), so the file holds callers' words only while undelivered.
    ``synced`` False (the same): ``synchronous=NORMAL`` (fsync'd: ``outbox_threads``).
    """

    def __init__(
        self, path: Path, keeps_record: bool = True, synced: bool = True
    ) -> None:
        self.path = path
        self.keeps_record = keeps_record
        self.synced = synced
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._generation = 0  # up by one at each close: threads' connections renew
        self.open()

    def open(self) -> None:
        """Open (or make) the file at ``path``; ``identity`` is the file opened."""
        path = self.path
        path.parent.mkdir(parents=True, exist_ok=True)
        # Job processes that start together all open the file: switching a new file to
        # WAL takes a lock the busy timeout does not wait for, so wait here.
        deadline = time.monotonic() + 5.0
        while True:
            try:
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.executescript(SCHEMA)
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        now = time.time()
        self.db.execute(
            f"DELETE FROM items WHERE NOT ({PENDING}) AND delivered_at < ?",
            (now - KEEP_DELIVERED,),
        )
        self.db.execute("DELETE FROM tombstones WHERE at < ?", (now - KEEP_TOMBSTONES,))
        self.identity = outbox_file.identity(path)

    @property
    def db(self) -> sqlite3.Connection:
        """This thread's connection (sqlite3 objects stay on the thread that made them;
        check_same_thread=False only so ``close`` can close them all)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None or self._local.generation != self._generation:
            conn = sqlite3.connect(
                self.path, timeout=5.0, isolation_level=None, check_same_thread=False
            )
            conn.execute(f"PRAGMA synchronous={'FULL' if self.synced else 'NORMAL'}")
            if not self.keeps_record:
                conn.execute("PRAGMA secure_delete=ON")
            self._local.conn, self._local.generation = conn, self._generation
            with self._lock:
                self._connections.append(conn)
        return conn

    def transaction(self) -> Any:
        """A context manager: BEGIN IMMEDIATE, then COMMIT, or ROLLBACK on an error."""
        db = self.db

        class Tx:
            def __enter__(self) -> sqlite3.Connection:
                db.execute("BEGIN IMMEDIATE")
                return db

            def __exit__(self, kind: object, *_: object) -> None:
                db.execute("ROLLBACK" if kind else "COMMIT")

        return Tx()

    # -- writes --

    def put(self, item: Item, deadline: float | None = None) -> None:
        """Insert or replace an item; a changed one is delivered again, an unchanged
        one is not. Raises TimeoutError past ``deadline`` (time.monotonic()), and
        ``StoreUnavailableError`` when MAX_PENDING rows wait already."""
        self.put_all([item], deadline)

    def put_all(
        self,
        items: list[Item],
        deadline: float | None = None,
        leases: dict[tuple[str, str], tuple[str, float]] | None = None,
    ) -> list[Row]:
        """``put`` for several items, in one transaction (all or none). ``leases``
        ((caller id, item id) -> (process, until)): those items' rows are leased to
        that process as well, unless another holds them or they are delivered, and
        returned (a write-through: spool.py); [] without."""
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError("the write was not started in time; nothing was written")
        now = time.time()
        with self.transaction() as db:
            waiting = db.execute(
                f"SELECT count(*) FROM items WHERE {PENDING}"
            ).fetchone()[0]
            if waiting >= MAX_PENDING:
                raise StoreUnavailableError(
                    f"the memory outbox {self.path} is full ({waiting} undelivered rows); "
                    "the service has not accepted writes for a while"
                )
            callers = {i.caller_id for i in items if i.kind == "exchange"}
            # each caller's erasure time, read once per batch
            erased = {c: outbox_erase.erased_before(db, c) for c in callers}
            leases = dict(leases or {})
            held = []
            for item in items:
                if item.kind == "exchange" and item.at <= erased[item.caller_id]:
                    continue  # said before its caller was forgotten: a late save
                key = (item.caller_id, item.id)
                row = self._put(db, item, now, leases.get(key))
                if row is not None:
                    held.append(row)
                    del leases[key]
            return held + _leased(db, leases, now)

    def _put(
        self,
        db: sqlite3.Connection,
        item: Item,
        now: float,
        lease: tuple[str, float] | None = None,
    ) -> Row | None:
        # the new row, when it is new and ``lease`` (process, until) was asked:
        # leased as it is written (one statement, the usual case of a save)
        settle = (
            SETTLE
            if item.kind == "exchange" and not item.data["assistant_text"]
            else 0.0
        )
        values = (
            item.caller_id,
            item.id,
            item.kind,
            item.call_id,
            item.at,
            json.dumps(item.data, sort_keys=True),
            now + settle,
            now,
        )
        if lease is not None:
            new = db.execute(
                """INSERT INTO items (caller_id, id, kind, call_id, at, data, next_at,
                                      queued_at, lease, lease_until, attempts)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)
                   ON CONFLICT (caller_id, id) DO NOTHING""",
                (*values, *lease),
            ).rowcount
            if new:
                # as ``row_of`` would read it back: version 1, nothing delivered yet
                fresh = Item(
                    item.id, item.caller_id, item.kind, item.call_id, item.at, item.data
                )
                return Row(fresh, 1, 0, None, 1)
        db.execute(
            """INSERT INTO items (caller_id, id, kind, call_id, at, data, next_at, queued_at)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?)
               ON CONFLICT (caller_id, id) DO UPDATE SET
                   call_id = excluded.call_id, at = excluded.at, data = excluded.data,
                   version = version + 1, attempts = 0, next_at = excluded.next_at,
                   queued_at = excluded.queued_at, rejected = 0, error = NULL
               WHERE data IS NOT excluded.data""",
            values,
        )
        return None

    forget = outbox_erase.forget
    learn_erasure = outbox_erase.learn_erasure
    purge = outbox_erase.purge

    # -- reads --

    def rows(
        self, caller_id: str, kinds: tuple[str, ...], fresh: bool = False
    ) -> tuple[list[Row], Tombstones]:
        """The caller's rows of ``kinds`` (and, with ``fresh``, the exchanges the
        service may not have indexed yet: undelivered or delivered within
        LAG_WINDOW), and what was forgotten."""
        marks = ",".join("?" * len(kinds)) or "NULL"
        found = self.db.execute(
            f"""SELECT {ROW} FROM items
                WHERE caller_id = ? AND (kind IN ({marks}) OR (? AND kind = 'exchange'
                      AND (delivered < version OR delivered_at > ?)))""",
            (caller_id, *kinds, fresh, time.time() - LAG_WINDOW),
        ).fetchall()
        return [row_of(r) for r in found], tombstones(self.db, caller_id)

    def tombstones(self, caller_id: str) -> Tombstones:
        """What was forgotten of the caller (``rows``' second half, alone)."""
        return tombstones(self.db, caller_id)

    def callers(self, after: str, limit: int) -> list[str]:
        rows = self.db.execute(
            "SELECT DISTINCT caller_id FROM items WHERE caller_id > ? ORDER BY caller_id LIMIT ?",
            (after, limit),
        )
        return [r[0] for r in rows]

    def stats(self) -> dict[str, int]:
        counts = dict(self.db.execute("SELECT kind, count(*) FROM items GROUP BY kind"))
        callers = self.db.execute(
            "SELECT count(DISTINCT caller_id) FROM items"
        ).fetchone()[0]
        return {
            "callers": callers,
            **{what: counts.get(k, 0) for what, k in KIND_OF.items()},
        }

    def close(self) -> None:
        with self._lock:
            self._generation += 1
            for conn in self._connections:
                conn.close()
            self._connections.clear()


def tombstones(db: sqlite3.Connection, caller_id: str) -> Tombstones:
    """What the outbox's tombstones say was forgotten of the caller."""
    forgotten = db.execute(
        "SELECT item_id, call_id FROM tombstones WHERE caller_id = ?", (caller_id,)
    ).fetchall()
    return Tombstones(
        frozenset(m[0] for m in forgotten if m[0]),
        frozenset(m[1] for m in forgotten if m[1]),
        outbox_erase.erased_before(db, caller_id),
    )


def _leased(
    db: sqlite3.Connection,
    leases: dict[tuple[str, str], tuple[str, float]],
    now: float,
) -> list[Row]:
    """Lease these pending rows (``Outbox.put_all``'s ``leases``) unless another
    process holds them; returns those now leased."""
    held = []
    for (caller_id, item_id), (who, until) in leases.items():
        leased = db.execute(
            "UPDATE items SET lease = ?, lease_until = ?, attempts = attempts + 1"
            f" WHERE caller_id = ? AND id = ? AND {PENDING} AND lease_until <= ?",
            (who, until, caller_id, item_id, now),
        ).rowcount
        if leased:
            found = db.execute(
                f"SELECT {ROW} FROM items WHERE caller_id = ? AND id = ?",
                (caller_id, item_id),
            ).fetchone()
            held.append(row_of(found))
    return held


def row_of(r: Any) -> Row:
    """The Row of an ``items`` row selected as ``Outbox.rows`` selects it."""
    item = Item(r[1], r[0], r[2], r[3], r[4], json.loads(r[5]), json.loads(r[6]))
    return Row(item, r[7], r[8], r[9], r[10])
