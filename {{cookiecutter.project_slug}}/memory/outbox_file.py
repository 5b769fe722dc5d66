"""The outbox file itself: noticing that it is no longer the file this process
opened, and carrying on in a new one without losing what it held.

Another tool or an operator can delete the spool or outbox file while a worker has
it open (``rm data/*``, a clean-up job), or truncate it or write over it. SQLite
does not notice: a deleted file's open connection keeps writing into an inode no
other process will ever read, so every write "succeeds" and dies with the process
(measured: a call spooled while its store refused writes lost all 11 exchanges,
and logged them as saved). So before each group commit, and before each fsync of a
window, the writer thread checks that the path still names the file it opened (its
inode); when not, it reads back what the open connection still can (the
undelivered rows and the erasure marks), goes on in the file now at the path (a new
one if there is none), writes them into it, and logs one ERROR. A file truncated or
overwritten in place keeps its inode and is not noticed here.

Units: none (paths and counts).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .outbox import Outbox

Identity = tuple[int, int]


def identity(path: Path) -> Identity | None:
    """(device, inode) of the file at ``path``; None when there is none. By
    ``os.stat`` only: opening and closing the file here would drop every lock
    SQLite holds on it in this process (POSIX advisory locks go with any close:
    sqlite.org/howtocorrupt.html, 2.2), and another process could then delete the
    write-ahead log under this one."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (found.st_dev, found.st_ino)


def _remove_stale_logs(path: Path) -> None:
    # The deleted file's -wal and -shm must not be read as a new file's; but once
    # another process has made the new file, they are its own (re-checked right
    # before each unlink).
    for name in (path.name + "-wal", path.name + "-shm"):
        if identity(path) is None:
            (path.parent / name).unlink(missing_ok=True)


def renew(outbox: Outbox) -> int | None:
    """None when ``outbox.path`` is still the file ``outbox`` opened. Else (deleted
    or replaced) the outbox continues in the file now at the path (a new one unless
    another process has made it already), holding the undelivered rows and the
    tombstones this process could still read from the old one; returns how many
    rows (-1: the old file could not be read, and what it held is lost). Runs on the
    writer thread."""
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
        _remove_stale_logs(outbox.path)
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
