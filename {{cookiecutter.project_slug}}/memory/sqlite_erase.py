"""The SQLite store's erasure after a forget or a purge: the forgotten rows' words
removed from the search index and the -wal file, in steps.

Why in steps: the forget's own transaction deletes the rows (no query finds them
once it commits), but FTS5 keeps deleted turns' words in its index segments until a
merge drops them (``erase_step``). 'optimize' merges the whole index in one
statement under SQLite's write lock, which every worker process on the file shares:
25.9 s at 1M stored exchanges, in which another process's 5 closing calls lost all 25
of their exchanges (their saves waited out the busy timeout). Here the same merge is
FTS5's incremental 'merge', at most ``ERASE_STEP_PAGES`` (25) index pages a step,
each step a transaction and a writer-thread job of its own, so other processes'
saves, and this process's queued meanwhile, take the lock between steps: the longest
step was 84 ms at 1M exchanges (25 ms at 10k, 137 ms at 100k; 2 cores at load 10
to 11), and none of those 25 exchanges was lost. A TRUNCATE checkpoint (``checkpoint``) ends
it, waiting for readers in short tries for the same reason. The kit's
benchmarks/forget_erase.py measures it; benchmarks/README.md has the figures.

``Erasure`` runs it for one ``SQLiteStore``: a forget while it runs joins it, and
``SQLiteStore.close`` waits for its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from .errors import FAIL_OPEN
from .sqlite_file import SQLiteFile, passing

logger = logging.getLogger("memory")

ERASE_STEP_PAGES = 25
"""Most FTS5 index pages (``pgsz``: 4,050 bytes by default) one step of the erasure's
merge writes (``erase_step``): 25 to 137 ms for the longest step in files of 10,000 to
1,000,000 exchanges on a 2-core machine at load 10 (the kit's
benchmarks/forget_erase.py), so another process's save waits at most that long, far
under its busy timeout (``sqlite_store.BUSY_TIMEOUT``, 2 s). At 1M exchanges the
whole merge took 3,380 steps."""
CHECKPOINT_WAIT = 0.1
"""Seconds one try of the erasure's TRUNCATE checkpoint waits for readers in other
processes: it holds the write lock while it waits, so it waits in short tries, with
other writes in between (``checkpoint``)."""
ERASE_BUSY_TRIES = 5
"""Times in a row a step of the erasure is tried when another process holds the
write lock past the busy timeout, before the erasure gives up (logged; the next
forget erases again)."""


def erase_step(conn: sqlite3.Connection, restart: bool) -> bool:
    """One bounded step of removing deleted rows' words from the search index; returns
    whether there is more to do.

    secure_delete (set on every connection) zeroes a deleted row where it lay, but
    FTS5 keeps the words of deleted turns in its index segments, behind delete
    markers, until a merge whose output is the index's oldest segment drops both
    (SQLite 3.40 has no FTS5 secure-delete option). That is what 'optimize' does in
    one statement, rewriting the whole index under the write lock (about 20 ms per
    1,000 stored exchanges: 21 to 26 s at 1M, in which other processes' saves timed
    out). The same merge, as FTS5's documentation gives it: 'merge' with a negative
    page count first (``restart``: every segment moved to one level, so the merge
    covers them all and its output is the oldest), then with a positive one until a
    step changes less than 2 rows; each at most ``ERASE_STEP_PAGES`` pages, in a
    transaction of its own (the connection is in autocommit), so other writers get
    the lock between steps. A merge started stays in the index's structure record:
    saves meanwhile add segments of their own and do not restart it."""
    before = conn.total_changes
    pages = -ERASE_STEP_PAGES if restart else ERASE_STEP_PAGES
    conn.execute(
        "INSERT INTO turns_fts (turns_fts, rank) VALUES ('merge', ?)", (pages,)
    )
    return conn.total_changes - before >= 2


def checkpoint(conn: sqlite3.Connection, busy_timeout: float) -> bool:
    """One try of the erasure's last step: a TRUNCATE checkpoint (every page back into
    the database, the -wal file cut to zero bytes, so no earlier version of a changed
    page is left in it), waiting at most ``CHECKPOINT_WAIT`` s for readers in other
    processes. Returns whether it was done; the connection's busy timeout is then
    ``busy_timeout`` again. 0 copies of a forgotten word are left after the merge and
    this (tests/test_sqlite_erase.py; the kit's benchmarks/forget_erase.py has the
    figures and why each step is needed)."""
    conn.execute(f"PRAGMA busy_timeout = {int(CHECKPOINT_WAIT * 1000)}")
    try:
        busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
    return not busy


class Erasure:
    """The erasure after a store's forgets and purges, on its writer thread: one at a
    time, each ``soon`` joining the one under way. Failures are logged (WARNING), not
    raised: the rows are deleted already, and the next forget erases again."""

    def __init__(self, writer: ThreadPoolExecutor, file: SQLiteFile) -> None:
        self._writer = writer
        self._file = file
        # done when _erased is; a restart asked for by a forget meanwhile; whether a
        # merge is under way
        self._lock = threading.Lock()
        self._erased: Future[None] | None = None
        self._restart = False
        self._again = False
        self._merging = False
        self._checkpoint_tries = 0
        self._busy = 0  # steps in a row refused by another process's lock

    def soon(self, *, index: bool) -> None:
        """Queue the erasure on the writer thread behind the committed delete (the
        index merge too when ``index``: exchanges were deleted), not awaited: the
        caller hears "forgotten" as soon as no query can find the rows, and the bytes
        are gone moments later (``wait``)."""
        # In bounded steps, each a job of its own that queues the next (``_next``),
        # so this process's saves queued meanwhile run between them, as other
        # processes' do.
        if self._file.closed:  # a forget that was running when close() began
            logger.warning("memory: forgotten rows are deleted, not yet erased: closed")
            return
        with self._lock:
            self._restart |= index
            self._again = True
            self._checkpoint_tries = 0
            if self._erased is not None:  # running: it goes on with this one's rows
                return
            self._erased = Future()
            self._erased.add_done_callback(_erase_failed)
        self._writer.submit(self._next)

    async def wait(self) -> None:
        """Until no erasure is under way (one that failed was logged)."""
        while self._erased is not None:
            with contextlib.suppress(Exception):
                await asyncio.wrap_future(self._erased)

    def _next(self) -> None:
        # One step (erase_step, then checkpoint), on the writer thread; the next step
        # is queued behind what was queued meanwhile.
        try:
            more = self._step(self._file.conn())
            self._busy = 0
        except FAIL_OPEN as exc:  # logged by _erase_failed; a forget erases again
            if isinstance(exc, sqlite3.Error) and passing(exc):
                # another process held the lock past the busy timeout: try again
                self._busy += 1
                if self._busy < ERASE_BUSY_TRIES:
                    self._writer.submit(self._next)
                    return
            self._busy = 0
            with self._lock:
                erased, self._erased = self._erased, None
                self._merging = self._restart = self._again = False
            if erased is not None:
                erased.set_exception(exc)
            return
        if more:
            self._writer.submit(self._next)

    def _step(self, conn: sqlite3.Connection) -> bool:
        with self._lock:
            restart, self._restart = self._restart, False
            self._again = False
        if restart or self._merging:
            try:
                self._merging = erase_step(conn, restart)
            except BaseException:
                with self._lock:  # the step is to be made again
                    self._restart |= restart
                raise
            return True
        busy_timeout = self._file.busy_timeout
        if not checkpoint(conn, busy_timeout):
            self._checkpoint_tries += 1
            if self._checkpoint_tries * CHECKPOINT_WAIT < busy_timeout:
                return True
            raise sqlite3.OperationalError(
                "a reader held the WAL past the busy timeout; forgotten rows' earlier "
                "page versions stay in the -wal file until the next checkpoint"
            )
        with self._lock:
            if self._again:  # another forget came: its rows' turn now
                return True
            erased, self._erased = self._erased, None
        if erased is not None:
            erased.set_result(None)
        return False


def _erase_failed(done: Any) -> None:
    if not done.cancelled() and done.exception() is not None:
        logger.warning(
            "memory: forgotten rows are deleted, not yet erased: %r", done.exception()
        )
