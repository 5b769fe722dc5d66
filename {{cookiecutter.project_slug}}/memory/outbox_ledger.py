"""What delivery to a hosted service needs from the outbox file: due work leased to
one process at a time (``LEASE``), each try's outcome (delivered with the service's
ids, failed and when to try again, or rejected), the backlog, and the service's own
ids of callers. Synchronous and blocking, like ``Outbox``: HostedStore runs it on the
outbox's threads (``outbox_threads.OutboxThreads``).

Units: seconds (times are seconds since the epoch unless said otherwise).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any

from .outbox import PENDING, Outbox, row_of, tombstones
from .outbox_items import Row, Tombstones

LEASE = 30.0
"""Seconds a process holds the rows it is delivering; rows of a process that died
are taken over by another one after this."""


class Ledger:
    """The delivery bookkeeping of ``outbox`` (its ``items``, ``deletes`` and
    ``remote_ids`` tables), on the outbox's connections."""

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox
        self.me = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"

    def claim(self, limit: int) -> tuple[list[dict[str, Any]], list[Row]]:
        """Lease due work to this process: queued deletes first, then items of
        callers with no delete waiting (so a delete never overtakes an earlier save,
        nor a save an earlier delete)."""
        now = time.time()
        free = "next_at <= ? AND lease_until <= ?"
        with self.outbox.transaction() as db:
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
        return deletes, [row_of(r) for r in rows]

    def delivered(self, row: Row, remote: dict[str, Any]) -> None:
        """The service has ``row``'s version. If the item was forgotten meanwhile, its
        service copy is deleted next."""
        with self.outbox.transaction() as db:
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

    def delivered_all(self, rows: list[Row]) -> dict[str, Tombstones]:
        """The target has these rows' versions (a local store: ``put_all``), recorded
        in one transaction. A spool that keeps no record (``Outbox.keeps_record``
        False) deletes them at once, unless a newer version came meanwhile, and
        returns what was forgotten of their callers (those with any tombstone),
        read in the same transaction:
        a forget that this does not see runs its store's forget after the write
        (spool.py); {} for an outbox that keeps its record."""
        now = time.time()
        mark = """UPDATE items SET delivered = ?, delivered_at = ?, attempts = 0,
                      lease = NULL, lease_until = 0, error = NULL
                  WHERE caller_id = ? AND id = ?"""
        with self.outbox.transaction() as db:
            if self.outbox.keeps_record:
                db.executemany(
                    mark, [(r.version, now, r.item.caller_id, r.item.id) for r in rows]
                )
                return {}
            for r in rows:
                key = (r.item.caller_id, r.item.id)
                gone = db.execute(
                    "DELETE FROM items WHERE caller_id = ? AND id = ? AND version = ?",
                    (*key, r.version),
                ).rowcount
                if not gone:  # a newer version came meanwhile: it is delivered next
                    db.execute(mark, (r.version, now, *key))
            found = {c: tombstones(db, c) for c in {r.item.caller_id for r in rows}}
            return {c: marks for c, marks in found.items() if marks != Tombstones()}

    def release(self, rows: list[Row], deletes: list[int] | None = None) -> None:
        """Give back this process's leases of ``rows`` and of the queued deletes
        ``deletes`` (their seqs): a round cut short."""
        with self.outbox.transaction() as db:
            db.executemany(
                "UPDATE items SET lease = NULL, lease_until = 0"
                " WHERE caller_id = ? AND id = ? AND lease = ?",
                [(r.item.caller_id, r.item.id, self.me) for r in rows],
            )
            db.executemany(
                "UPDATE deletes SET lease = NULL, lease_until = 0"
                " WHERE seq = ? AND lease = ?",
                [(seq, self.me) for seq in deletes or []],
            )

    def failed_all(
        self, rows: list[Row], error: BaseException, retry_in: float | None
    ) -> None:
        """``failed`` for a batch, in one transaction."""
        with self.outbox.transaction():
            for r in rows:
                self.failed("items", (r.item.caller_id, r.item.id), error, retry_in)

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
        self.outbox.db.execute(
            f"""UPDATE {table} SET next_at = ?, lease = NULL,
                    lease_until = 0, error = ? {rejected} WHERE {where}""",
            (
                time.time() + (retry_in if retry_in is not None else 1e9),
                repr(error)[:500],
                *key,
            ),
        )

    def due_now(self, every: bool = False) -> None:
        """Make every undelivered row due (``close``: no more waiting for replies):
        those never tried, or with ``every`` (a local store) those waiting out a
        backoff too."""
        tried = "" if every else " AND attempts = 0"
        self.outbox.db.execute(f"UPDATE items SET next_at = 0 WHERE {PENDING}{tried}")

    def deleted(self, seq: int) -> None:
        self.outbox.db.execute("DELETE FROM deletes WHERE seq = ?", (seq,))

    def backlog(self) -> tuple[int, float | None, float | None]:
        """(undelivered rows, seconds the oldest has waited, seconds until the next is
        due) for the log and the delivery loop."""
        now = time.time()
        count, oldest, due = self.outbox.db.execute(
            "SELECT count(*), min(queued_at), min(max(next_at, lease_until)) FROM items "
            f"WHERE {PENDING}"
        ).fetchone()
        d_count, d_due = self.outbox.db.execute(
            "SELECT count(*), min(max(next_at, lease_until)) FROM deletes"
        ).fetchone()
        dues = [x for x in (due, d_due) if x is not None]
        return (
            count + d_count,
            None if oldest is None else now - oldest,
            None if not dues else max(0.0, min(dues) - now),
        )

    # -- the service's ids --

    def remote_id(self, caller_id: str, name: str) -> str | None:
        row = self.outbox.db.execute(
            "SELECT value FROM remote_ids WHERE caller_id = ? AND name = ?",
            (caller_id, name),
        ).fetchone()
        return row[0] if row else None

    def set_remote_id(self, caller_id: str, name: str, value: str) -> None:
        self.outbox.db.execute(
            "INSERT OR REPLACE INTO remote_ids (caller_id, name, value) VALUES (?, ?, ?)",
            (caller_id, name, value),
        )
