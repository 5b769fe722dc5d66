"""What the outbox (outbox.py) does when a caller is forgotten: ``forget`` (items, a
call, or the caller), ``learn_erasure`` (another outbox's forget, told by the
service's mark) and ``purge`` (retention). Each deletes the rows, keeps tombstones
(ids, no words) and queues the service's deletes of what it may hold, including
writes tried and not confirmed (``LATE_WRITES``). Functions of an ``Outbox``
(``self``), which names them as its own methods; synchronous and blocking.

Units: seconds (times are seconds since the epoch unless said otherwise).
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import TYPE_CHECKING, Any

from .outbox_items import KIND_OF, Item

if TYPE_CHECKING:
    from .outbox import Outbox

LATE_WRITES = 120.0
"""Seconds after a forget that its delete is sent again when a write in its scope was
tried and not confirmed (a timeout, an answer lost, a worker killed mid-request): a
service may carry such a write out after the kit gave up on it, and after the first
delete. The caller's later writes wait for that second delete (deletes and saves of
one caller stay in order)."""


def forget(
    self: Outbox,
    caller_id: str,
    scope: dict[str, Any],
    also: list[Item],
    deadline: float,
    remote: bool = True,
) -> int:
    """Delete the items in ``scope`` ({"items": [id, ...]} | {"call": call id} | {}
    for everything) and ``also`` (what the service listed in that scope), remember
    the forget (tombstone) and, with ``remote``, queue the service's delete (a
    local store forgets itself: spool.py). Undelivered items are never delivered
    now. Returns how many distinct items were forgotten."""
    if time.monotonic() > deadline:
        raise TimeoutError("the forget was not started in time; nothing was forgotten")
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
    with self.transaction() as db:
        local = db.execute(
            "SELECT id, remote, delivered, lease_until, attempts, version, kind, "
            f"call_id FROM items WHERE {where}",
            args,
        ).fetchall()
        count = len({r[0] for r in local} | {i.id for i in also})
        # What the service may hold: delivered, being delivered, tried (its answer
        # lost or late) or listed by it; every copy listed (two tries each made
        # one), and the call of an exchange (where a service keeps it).
        gone = [
            (r[0], _with_call(json.loads(r[1]), r[6], r[7]))
            for r in local
            if r[2] or r[3] > now or r[4]
        ]
        gone += [(i.id, _with_call(i.remote, i.kind, i.call_id)) for i in also]
        distinct = {json.dumps(g, sort_keys=True): g for g in gone}
        gone = [distinct[k] for k in sorted(distinct)]
        # a write tried and not confirmed may still be carried out: delete again
        unsure = any(r[2] < r[5] and (r[3] > now or r[4]) for r in local)
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
        if remote and (gone or not scope):
            again = [now + LATE_WRITES] if unsure else []
            db.executemany(
                "INSERT INTO deletes (caller_id, everything, items, next_at) "
                "VALUES (?, ?, ?, ?)",
                [
                    (caller_id, int(not scope), json.dumps(gone), at)
                    for at in (0.0, *again)
                ],
            )
    if not self.keeps_record:  # the forgotten words out of the WAL file too
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return count


def learn_erasure(self: Outbox, caller_id: str, before: float) -> None:
    """Another outbox's worker erased the caller at ``before`` (the service's
    mark): remember it (a tombstone) and drop this file's rows of the caller
    from before then, queueing the service's delete of those it may hold."""
    with self.transaction() as db:
        rows = db.execute(
            "SELECT id, remote, kind, call_id FROM items WHERE caller_id = ? "
            "AND at <= ? AND (delivered OR attempts OR lease_until > ?)",
            (caller_id, before, time.time()),
        ).fetchall()
        db.execute(
            "DELETE FROM items WHERE caller_id = ? AND at <= ?", (caller_id, before)
        )
        db.execute(
            "INSERT INTO tombstones (caller_id, item_id, call_id, before, at) "
            "VALUES (?, NULL, NULL, ?, ?)",
            (caller_id, before, time.time()),
        )
        gone = [[r[0], _with_call(json.loads(r[1]), r[2], r[3])] for r in rows]
        if gone:
            db.execute(
                "INSERT INTO deletes (caller_id, everything, items) VALUES (?, 0, ?)",
                (caller_id, json.dumps(gone)),
            )


def purge(self: Outbox, what: str, before: float) -> int:
    """Delete every caller's ``what`` older than ``before``, here and (queued) at
    the service; returns how many."""
    kind = KIND_OF[what]
    with self.transaction() as db:
        rows = db.execute(
            "SELECT caller_id, id, remote, delivered or attempts or lease_until > ? "
            "FROM items WHERE kind = ? AND at < ?",
            (time.time(), kind, before),
        ).fetchall()
        db.execute("DELETE FROM items WHERE kind = ? AND at < ?", (kind, before))
        by_caller: dict[str, list[tuple[str, Any]]] = {}
        for caller_id, item_id, remote, tried in rows:  # the service may have it
            db.execute(
                "INSERT INTO tombstones (caller_id, item_id, call_id, before, at) "
                "VALUES (?, ?, NULL, 0, ?)",
                (caller_id, item_id, time.time()),
            )
            if tried:
                by_caller.setdefault(caller_id, []).append(
                    (item_id, json.loads(remote))
                )
        for caller_id, items in by_caller.items():
            db.execute(
                "INSERT INTO deletes (caller_id, everything, items) VALUES (?, 0, ?)",
                (caller_id, json.dumps(items)),
            )
    return len(rows)


def _with_call(remote: dict[str, Any], kind: str, call_id: str) -> dict[str, Any]:
    # an exchange's call, for a service that keeps exchanges by call (Zep's threads)
    return {**remote, "lkm_call": call_id} if kind == "exchange" else remote


def erased_before(db: sqlite3.Connection, caller_id: str) -> float:
    # what this outbox's tombstones say was forgotten of the caller, up to when
    found = db.execute(
        "SELECT max(before) FROM tombstones WHERE caller_id = ?", (caller_id,)
    ).fetchone()[0]
    return float(found or 0.0)
