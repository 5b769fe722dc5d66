"""The outbox file itself: noticing that it is no longer the file this process
opened, and carrying on in a new one without losing what it held.

Another tool or an operator can delete the spool or outbox file while a worker has
it open (``rm data/*``, a clean-up job), or truncate it or write over it. SQLite
does not notice: a deleted file's open connection keeps writing into an inode no
other process will ever read, so every write "succeeds" and dies with the process
(measured: a call spooled while its store refused writes lost all 11 exchanges,
and logged them as saved). So before each group commit, and before each fsync of a
window, the writer thread checks that the path still names the file it opened and
that the file still starts with SQLite's header; when not, it reads back what the
open connection still can (the undelivered rows and the erasure marks), makes a
new file at the path, writes them into it, and logs one ERROR.

Units: none (paths and counts).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .outbox import Outbox

HEADER = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file (sqlite.org/fileformat.html,
1.3 "The Database Header")."""

Identity = tuple[int, int]


def identity(path: Path) -> Identity | None:
    """(device, inode) of the SQLite file at ``path``; None when there is none, or
    what is there is not a database (truncated, overwritten)."""
    try:
        with path.open("rb") as f:
            if f.read(len(HEADER)) != HEADER:
                return None
            found = os.fstat(f.fileno())
    except OSError:
        return None
    return (found.st_dev, found.st_ino)


def _remove_damaged(path: Path) -> None:
    # Only what is not a database: a file another process has just made anew is
    # kept (it re-checks right before each unlink), and a stale -wal must not be
    # applied to a new main file.
    for name in (path.name, path.name + "-wal", path.name + "-shm"):
        if identity(path) is None:
            (path.parent / name).unlink(missing_ok=True)


def renew(outbox: Outbox) -> int | None:
    """None when ``outbox.path`` is still the file ``outbox`` opened. Else the
    outbox continues in the file now at the path (a new one unless another process
    has made it already), holding the undelivered rows and the tombstones this
    process could still read from the old one; returns how many rows (-1: the old
    file could not be read at all, and what it held is lost). Runs on the writer
    thread."""
    if identity(outbox.path) == outbox.identity:
        return None
    # lazily: outbox.py imports this module
    from .outbox import PENDING, ROW, row_of

    db = outbox.db
    try:
        rows = [
            row_of(r) for r in db.execute(f"SELECT {ROW} FROM items WHERE {PENDING}")
        ]
        marks = db.execute(
            "SELECT caller_id, item_id, call_id, before, at FROM tombstones"
        ).fetchall()
    except (sqlite3.Error, ValueError):
        rows, marks = [], []
        kept = -1
    else:
        kept = len(rows)
    outbox.close()
    if identity(outbox.path) is None:
        _remove_damaged(outbox.path)
    outbox.open()
    with outbox.transaction() as new:
        new.executemany(
            "INSERT INTO tombstones (caller_id, item_id, call_id, before, at) "
            "VALUES (?, ?, ?, ?, ?)",
            marks,
        )
    if rows:
        outbox.put_all([r.item for r in rows])
    return kept
