"""The outbox of the hosted memory backends: a small SQLite file on the worker.

Every write (exchange, fact, call summary, forget) of a hosted store (hosted.py) is
first written here (stdlib sqlite3; hosted.py runs it on a thread of its own, never on
the event loop), then delivered to the service in the background, oldest first. An
outage, a storm of 5xx answers or a worker killed mid-call loses nothing: the rows
wait in the file, and the next process that opens it delivers them. Delivered rows
are marked and kept ``KEEP_DELIVERED`` seconds: they cover the service's write lag
(recall merges them with what the service returns), they are the idempotency ledger
(the service's ids of each item), and they answer what the services cannot (exact
exports, ``callers``, ``stats``, ``purge``). Forgotten items become tombstones that
hide what the service still returns until its delete is done.

- ``Item``: one exchange, fact or call summary, as the outbox and a service see it;
- ``Outbox``: the file: durable writes, leases for delivery, the record, tombstones.

Units: seconds (times are seconds since the epoch unless said otherwise).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .errors import StoreUnavailableError
from .facts import Fact, fact_label, kind_takes_many, value_key
from .records import Exchange, Summary

SETTLE = 1.0
"""Seconds an exchange without a reply waits before delivery, so the reply usually
joins it first (one write per exchange instead of two)."""
LEASE = 30.0
"""Seconds a process holds the rows it is delivering; rows of a process that died
are taken over by another one after this."""
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

KINDS = ("exchange", "fact", "summary")
KIND_OF = {"exchanges": "exchange", "facts": "fact", "summaries": "summary"}
"""PURGEABLE's names -> Item kinds."""


def short_hash(*parts: str) -> str:
    """24 hex digits of SHA-256 over ``parts``: ids for facts and summaries."""
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


# -- What is stored ------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """One exchange, fact or call summary, as the outbox and a Service see it.

    ``id`` is stable per caller: the exchange key, ``fact-<hash of kind>`` (a newer
    fact of the same kind replaces the item; for a kind that takes many values, one
    item per value: ``fact-<hash of kind and value>``; a replaced value kept as
    history is an item of its own), ``summary-<hash of call id>``. ``at`` is
    the exchange's or summary's ``created_at``, the fact's ``updated_at`` (seconds
    since the epoch). ``data`` holds the memory type's fields; ``remote`` the
    service's own ids for it (what a Service returned from ``put``)."""

    id: str
    caller_id: str
    kind: str
    call_id: str
    at: float
    data: dict[str, Any]
    remote: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of_exchange(cls, e: Exchange) -> Item:
        data = {**e.__dict__, "item_ids": list(e.item_ids)}
        return cls(e.key, e.caller_id, "exchange", e.call_id, e.created_at, data)

    @classmethod
    def of_fact(cls, caller_id: str, f: Fact) -> Item:
        # replaced_at 0.0: a current value (metadata values cannot be null at Zep)
        data = {
            "kind": f.kind,
            "value": f.value,
            "updated_at": f.updated_at,
            "learned_at": f.learned_at,
            "replaced_at": f.replaced_at or 0.0,
        }
        if f.replaced_at is not None:
            item_id = short_hash(f.kind, value_key(f.value), repr(f.replaced_at))
        elif kind_takes_many(f.kind):
            item_id = short_hash(f.kind, value_key(f.value))
        else:
            item_id = short_hash(f.kind)
        return cls(f"fact-{item_id}", caller_id, "fact", "", f.updated_at, data)

    @classmethod
    def of_summary(cls, caller_id: str, s: Summary) -> Item:
        data = {"call_id": s.call_id, "text": s.text, "created_at": s.created_at}
        item_id = f"summary-{short_hash(s.call_id)}"
        return cls(item_id, caller_id, "summary", s.call_id, s.created_at, data)

    def exchange(self) -> Exchange:
        return Exchange(**{**self.data, "item_ids": tuple(self.data["item_ids"])})

    def fact(self) -> Fact:
        d = self.data  # items written before dates were kept have no learned_at
        return Fact(
            d["kind"],
            d["value"],
            d["updated_at"],
            d.get("learned_at") or 0.0,
            d.get("replaced_at") or None,
        )

    def summary(self) -> Summary:
        return Summary(self.data["call_id"], self.data["text"], self.data["created_at"])

    def text(self) -> str:
        """What the service reads: words, not JSON (it extracts and indexes them)."""
        d = self.data
        if self.kind == "fact" and d.get("replaced_at"):  # history, not true now
            return f"{fact_label(d['kind'])} (no longer current): {d['value']}"
        if self.kind == "fact":
            return f"{fact_label(d['kind'])}: {d['value']}"
        if self.kind == "summary":
            return f"Summary of an earlier call: {d['text']}"
        # (an empty caller side: the call's opening, the agent's greeting alone)
        said = [f"Caller: {d['user_text']}"] if d["user_text"] else []
        return "\n".join(
            said + ([f"Agent: {d['assistant_text']}"] if d["assistant_text"] else [])
        )

    def metadata(self) -> dict[str, Any]:
        """The item as flat metadata (str, number, bool, list of str; 10 keys at most,
        Zep's limit [ZEP-SDK3]), which the services store and return as given: how an
        item read back from a service is rebuilt exactly (``from_metadata``)."""
        return {
            "lkm_type": self.kind,
            "lkm_id": self.id,
            **{f"lkm_{k}": v for k, v in self.data.items()},
        }

    @classmethod
    def from_metadata(
        cls, caller_id: str, meta: Any, remote: dict[str, Any] | None = None
    ) -> Item | None:
        """The Item a service returned, or None for anything this kit did not write."""
        try:
            data = {k[4:]: v for k, v in meta.items() if k.startswith("lkm_")}
            kind, item_id = data.pop("type"), data.pop("id")
            if kind not in KINDS:
                return None
            item = cls(
                item_id,
                caller_id,
                kind,
                data.get("call_id", ""),
                0.0,
                data,
                remote or {},
            )
            # rebuilding the memory type checks every field is there
            at = {
                "exchange": lambda: item.exchange().created_at,
                "fact": lambda: item.fact().updated_at,
                "summary": lambda: item.summary().created_at,
            }[kind]()
            return replace(item, at=float(at))
        except (AttributeError, KeyError, TypeError, ValueError):
            return None


# -- The outbox ----------------------------------------------------------------------

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


@dataclass(frozen=True)
class Row:
    """An item as the outbox holds it."""

    item: Item
    version: int
    delivered: int
    delivered_at: float | None
    attempts: int

    @property
    def pending(self) -> bool:
        return self.delivered < self.version


@dataclass(frozen=True)
class Tombstones:
    """What was forgotten: item ids, call ids, and a time before which everything of
    the caller is gone. ``hides`` tells whether an item the service returned is one."""

    items: frozenset[str] = frozenset()
    calls: frozenset[str] = frozenset()
    before: float = 0.0

    def hides(self, item: Item) -> bool:
        return (
            item.id in self.items
            or (item.kind != "fact" and item.call_id in self.calls)
            or item.at <= self.before
        )


class Outbox:
    """The local SQLite file: durable writes, delivery bookkeeping, the record.

    Synchronous and blocking: HostedStore calls the writes from one thread and the
    reads from others (each thread has its own connection; in WAL mode a read never
    waits for a write, so recall never queues behind delivery bookkeeping). Several
    worker processes may share the file: WAL, a busy timeout, and leases on rows
    being delivered. ``synchronous=FULL``: a row is on disk when ``put`` returns.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.me = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
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

    @property
    def db(self) -> sqlite3.Connection:
        """This thread's connection (sqlite3 objects stay on the thread that made them;
        check_same_thread=False only so ``close`` can close them all)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.path, timeout=5.0, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA synchronous=FULL")
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def _tx(self) -> Any:
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

    def put_all(self, items: list[Item], deadline: float | None = None) -> None:
        """``put`` for several items, in one transaction (all or none)."""
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError("the write was not started in time; nothing was written")
        now = time.time()
        with self._tx() as db:
            waiting = db.execute(
                f"SELECT count(*) FROM items WHERE {PENDING}"
            ).fetchone()[0]
            if waiting >= MAX_PENDING:
                raise StoreUnavailableError(
                    f"the memory outbox {self.path} is full ({waiting} undelivered rows); "
                    "the service has not accepted writes for a while"
                )
            for item in items:
                self._put(db, item, now)

    def _put(self, db: sqlite3.Connection, item: Item, now: float) -> None:
        settle = (
            SETTLE
            if item.kind == "exchange" and not item.data["assistant_text"]
            else 0.0
        )
        db.execute(
            """INSERT INTO items (caller_id, id, kind, call_id, at, data, next_at, queued_at)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?)
               ON CONFLICT (caller_id, id) DO UPDATE SET
                   call_id = excluded.call_id, at = excluded.at, data = excluded.data,
                   version = version + 1, attempts = 0, next_at = excluded.next_at,
                   queued_at = excluded.queued_at, rejected = 0, error = NULL
               WHERE data IS NOT excluded.data""",
            (
                item.caller_id,
                item.id,
                item.kind,
                item.call_id,
                item.at,
                json.dumps(item.data, sort_keys=True),
                now + settle,
                now,
            ),
        )

    def forget(
        self, caller_id: str, scope: dict[str, Any], also: list[Item], deadline: float
    ) -> int:
        """Delete the items in ``scope`` ({"items": [id, ...]} | {"call": call id} | {}
        for everything) and ``also`` (what the service listed in that scope), remember
        the forget (tombstone) and queue the service's delete. Undelivered items are
        never delivered now. Returns how many distinct items were forgotten."""
        if time.monotonic() > deadline:
            raise TimeoutError(
                "the forget was not started in time; nothing was forgotten"
            )
        now = time.time()
        where, args = "caller_id = ?", [caller_id]
        if "items" in scope:
            marks = ",".join("?" * len(scope["items"])) or "NULL"
            where, args = where + f" AND id IN ({marks})", [*args, *scope["items"]]
        elif "call" in scope:
            where, args = (
                where + " AND call_id = ? AND kind != 'fact'",
                [*args, scope["call"]],
            )
        with self._tx() as db:
            local = db.execute(
                f"SELECT id, remote, delivered, lease_until FROM items WHERE {where}",
                args,
            ).fetchall()
            count = len({r[0] for r in local} | {i.id for i in also})
            # what the service may hold: delivered, being delivered, or listed by it
            gone = {r[0]: json.loads(r[1]) for r in local if r[2] or r[3] > now}
            for item in also:
                gone.setdefault(item.id, item.remote)
            db.execute(f"DELETE FROM items WHERE {where}", args)
            if not scope:  # the service's ids of the caller (a Zep user) go with it
                db.execute("DELETE FROM remote_ids WHERE caller_id = ?", (caller_id,))
            # one tombstone per forgotten item, or one for the call or the caller
            ids: list[str | None] = [*scope.get("items", [])] or [None]
            db.executemany(
                "INSERT INTO tombstones (caller_id, item_id, call_id, before, at) "
                "VALUES (?, ?, ?, ?, ?)",
                [
                    (caller_id, i, scope.get("call"), 0.0 if scope else now, now)
                    for i in ids
                ],
            )
            if gone or not scope:
                db.execute(
                    "INSERT INTO deletes (caller_id, everything, items) VALUES (?, ?, ?)",
                    (caller_id, int(not scope), json.dumps(sorted(gone.items()))),
                )
        return count

    def purge(self, what: str, before: float) -> int:
        """Delete every caller's ``what`` older than ``before``, here and (queued) at
        the service; returns how many."""
        kind = KIND_OF[what]
        with self._tx() as db:
            rows = db.execute(
                "SELECT caller_id, id, remote, delivered FROM items WHERE kind = ? AND at < ?",
                (kind, before),
            ).fetchall()
            db.execute("DELETE FROM items WHERE kind = ? AND at < ?", (kind, before))
            by_caller: dict[str, list[tuple[str, Any]]] = {}
            for caller_id, item_id, remote, delivered in rows:
                db.execute(
                    "INSERT INTO tombstones (caller_id, item_id, call_id, before, at) "
                    "VALUES (?, ?, NULL, 0, ?)",
                    (caller_id, item_id, time.time()),
                )
                if delivered:
                    by_caller.setdefault(caller_id, []).append(
                        (item_id, json.loads(remote))
                    )
            for caller_id, items in by_caller.items():
                db.execute(
                    "INSERT INTO deletes (caller_id, everything, items) VALUES (?, 0, ?)",
                    (caller_id, json.dumps(items)),
                )
        return len(rows)

    # -- delivery --

    def claim(self, limit: int) -> tuple[list[dict[str, Any]], list[Row]]:
        """Lease due work to this process: queued deletes first, then items of
        callers with no delete waiting (so a delete never overtakes an earlier save,
        nor a save an earlier delete)."""
        now = time.time()
        free = "next_at <= ? AND lease_until <= ?"
        with self._tx() as db:
            deletes = [
                {
                    "seq": r[0],
                    "caller_id": r[1],
                    "everything": bool(r[2]),
                    "items": json.loads(r[3]),
                    "attempts": r[4],
                }
                for r in db.execute(
                    f"SELECT seq, caller_id, everything, items, attempts FROM deletes WHERE {free} "
                    "AND seq IN (SELECT min(seq) FROM deletes GROUP BY caller_id) "
                    "ORDER BY seq LIMIT ?",
                    (now, now, limit),
                )
            ]
            rows = db.execute(
                f"""SELECT caller_id, id, kind, call_id, at, data, remote, version, delivered,
                           delivered_at, attempts FROM items
                    WHERE {PENDING} AND {free}
                      AND caller_id NOT IN (SELECT caller_id FROM deletes)
                    ORDER BY at LIMIT ?""",
                (now, now, limit),
            ).fetchall()
            # attempts counts tries as they start: a process killed mid-request leaves
            # a count, so the next one knows the service may have acted (Mem0 looks first)
            for d in deletes:
                db.execute(
                    "UPDATE deletes SET lease = ?, lease_until = ?, attempts = attempts + 1 "
                    "WHERE seq = ?",
                    (self.me, now + LEASE, d["seq"]),
                )
            for r in rows:
                db.execute(
                    "UPDATE items SET lease = ?, lease_until = ?, attempts = attempts + 1 "
                    "WHERE caller_id = ? AND id = ?",
                    (self.me, now + LEASE, r[0], r[1]),
                )
        return deletes, [_row(r) for r in rows]

    def delivered(self, row: Row, remote: dict[str, Any]) -> None:
        """The service has ``row``'s version. If the item was forgotten meanwhile, its
        service copy is deleted next."""
        with self._tx() as db:
            changed = db.execute(
                """UPDATE items SET delivered = ?, delivered_at = ?, remote = ?, attempts = 0,
                       lease = NULL, lease_until = 0, error = NULL
                   WHERE caller_id = ? AND id = ?""",
                (
                    row.version,
                    time.time(),
                    json.dumps(remote),
                    row.item.caller_id,
                    row.item.id,
                ),
            ).rowcount
            if not changed:
                db.execute(
                    "INSERT INTO deletes (caller_id, everything, items) VALUES (?, 0, ?)",
                    (row.item.caller_id, json.dumps([[row.item.id, remote]])),
                )

    def failed(
        self,
        table: str,
        key: tuple[Any, ...],
        error: BaseException,
        retry_in: float | None,
    ) -> None:
        """A delivery failed: try again in ``retry_in`` seconds, or never (None: the
        service rejected the item itself; it stays here, marked)."""
        where = "seq = ?" if table == "deletes" else "caller_id = ? AND id = ?"
        rejected = ", rejected = 1" if retry_in is None and table == "items" else ""
        self.db.execute(
            f"""UPDATE {table} SET next_at = ?, lease = NULL,
                    lease_until = 0, error = ? {rejected} WHERE {where}""",
            (
                time.time() + (retry_in if retry_in is not None else 1e9),
                repr(error)[:500],
                *key,
            ),
        )

    def due_now(self) -> None:
        """Make every undelivered row due (``close``: no more waiting for replies)."""
        self.db.execute(
            f"UPDATE items SET next_at = 0 WHERE {PENDING} AND attempts = 0"
        )

    def deleted(self, seq: int) -> None:
        self.db.execute("DELETE FROM deletes WHERE seq = ?", (seq,))

    def backlog(self) -> tuple[int, float | None, float | None]:
        """(undelivered rows, seconds the oldest has waited, seconds until the next is
        due) for the log and the delivery loop."""
        now = time.time()
        count, oldest, due = self.db.execute(
            "SELECT count(*), min(queued_at), min(max(next_at, lease_until)) FROM items "
            f"WHERE {PENDING}"
        ).fetchone()
        d_count, d_due = self.db.execute(
            "SELECT count(*), min(max(next_at, lease_until)) FROM deletes"
        ).fetchone()
        dues = [x for x in (due, d_due) if x is not None]
        return (
            count + d_count,
            None if oldest is None else now - oldest,
            None if not dues else max(0.0, min(dues) - now),
        )

    # -- reads --

    def rows(
        self, caller_id: str, kinds: tuple[str, ...], fresh: bool = False
    ) -> tuple[list[Row], Tombstones]:
        """The caller's rows of ``kinds`` (and, with ``fresh``, the exchanges the
        service may not have indexed yet: undelivered or delivered within
        LAG_WINDOW), and what was forgotten."""
        marks = ",".join("?" * len(kinds)) or "NULL"
        found = self.db.execute(
            f"""SELECT caller_id, id, kind, call_id, at, data, remote, version, delivered,
                       delivered_at, attempts FROM items
                WHERE caller_id = ? AND (kind IN ({marks}) OR (? AND kind = 'exchange'
                      AND (delivered < version OR delivered_at > ?)))""",
            (caller_id, *kinds, fresh, time.time() - LAG_WINDOW),
        ).fetchall()
        forgotten = self.db.execute(
            "SELECT item_id, call_id, before FROM tombstones WHERE caller_id = ?",
            (caller_id,),
        ).fetchall()
        tombstones = Tombstones(
            frozenset(m[0] for m in forgotten if m[0]),
            frozenset(m[1] for m in forgotten if m[1]),
            max((m[2] for m in forgotten), default=0.0),
        )
        return [_row(r) for r in found], tombstones

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

    def remote_id(self, caller_id: str, name: str) -> str | None:
        row = self.db.execute(
            "SELECT value FROM remote_ids WHERE caller_id = ? AND name = ?",
            (caller_id, name),
        ).fetchone()
        return row[0] if row else None

    def set_remote_id(self, caller_id: str, name: str, value: str) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO remote_ids (caller_id, name, value) VALUES (?, ?, ?)",
            (caller_id, name, value),
        )

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()


def _row(r: Any) -> Row:
    item = Item(r[1], r[0], r[2], r[3], r[4], json.loads(r[5]), json.loads(r[6]))
    return Row(item, r[7], r[8], r[9], r[10])
