"""The memory file as one process holds it: a SQLite connection per thread, the file
checked and migrated by the first one, a file deleted or replaced while in use, and
the upgrade of a big file of an older schema on a thread of its own.

WAL mode and a busy timeout make several worker processes (LiveKit runs each job in
its own process) safe on one file; ``PASSING`` errors (another process's lock, a
full disk) are conditions that pass, not failures of the file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from pathlib import Path

from .errors import FAIL_OPEN
from .sqlite_index import add_functions
from .sqlite_schema import SCHEMA_VERSION, migrate

logger = logging.getLogger("memory")

PASSING = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR)
"""SQLite's result codes for conditions that pass (another process's lock, a full disk,
a failed write): a file that gives one when opened is opened on first use instead."""

UPGRADE_SECONDS_PER_ROW = 0.0001
"""What upgrading from schema 3 (the turn index of versions 4 and 6) takes per exchange
on a 2-core machine, for the log line's estimate: 8.2 to 17.0 s for 100,000 in the
runs of benchmarks/README.md (``upgrade.py``), depending on the machine's load."""
UPGRADE_SECONDS_PER_ROW_LOADED = 0.00072
"""The slowest upgrade measured per exchange (``upgrade.py``): 20,000 exchanges from
schema 3 in 14.4 s at load average 11 on the 2-core machine (from schema 7: 4.6 s;
5,000 from schema 3: 2.7 s at load 10). ``sqlite_store.UPGRADE_IN_OPEN_ROWS`` is
bounded by it."""
UPGRADE_RETRY_AFTER = 0.5
"""Seconds between tries of a background upgrade while another process holds the
file's write lock (upgrading it itself, or writing)."""
UPGRADE_WAIT_LOG_EVERY = 60.0
"""Seconds between the warnings a background upgrade logs while it waits (another
process's write lock, a full disk): the first try that fails says why at once."""


class SQLiteFile:
    """The memory file at ``path`` as this process holds it (``SQLiteStore`` has one).

    ``conn`` gives each thread its own connection (sqlite3 objects must stay on the
    thread that made them), waiting up to ``busy_timeout`` seconds for another
    process's lock. Raises ``sqlite3.Error``, ``OSError`` and ``SchemaMismatchError``
    from the first connection's checks.
    """

    def __init__(self, path: Path, busy_timeout: float) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self.closed = False  # set when the store closes: an upgrade stops trying
        # The file the connections have open, as (st_dev, st_ino); None until the
        # first connection has checked (and migrated) it. A change of file bumps
        # the generation: every connection of an older one is closed.
        self._file: tuple[int, int] | None = None
        # its -wal and -shm, the same way: those a change of file leaves behind
        self._logs: tuple[tuple[int, int] | None, ...] = (None, None)
        self.generation = 0
        # Set while a big file of an older schema is upgraded after the store opened
        # (``upgrade_in_background``): why reads and writes are refused meanwhile.
        self.upgrading: str | None = None
        # The schema version this process migrated the file from (None: it found the
        # file current, e.g. another process upgraded it while this one waited).
        self._migrated_from: int | None = None

    def conn(self) -> sqlite3.Connection:
        """This thread's connection to the file at ``self.path``, checked before each
        use: if the file was deleted or replaced since the connections opened it
        (another device or inode at the path), the change is logged as an error,
        every connection to the old file is closed (a query running on one fails and
        is retried by its caller) and the file at the path is opened afresh, created
        and migrated if need be, so nothing more is written into a file no one will
        read again. Raises what ``_open`` raises."""
        conn = getattr(self._local, "conn", None)
        if (
            conn is not None
            and self._local.generation == self.generation
            and self._file == _identity(self.path)
        ):
            return conn
        with self._lock:
            if conn is not None and self._local.generation == self.generation:
                self._file_changed()  # this thread noticed it first
            return self._open()

    def _file_changed(self) -> None:
        now = _identity(self.path)
        logger.error(
            "memory: the memory file %s was %s while in use; reopening %s. What "
            "was saved in the old file is not in the new one; pending writes go to "
            "the new one",
            self.path,
            "deleted" if now is None else "replaced",
            "a new file there" if now is None else "the file now there",
        )
        for old in self._connections:
            old.close()  # a query running on it fails, and its caller retries
        self._connections.clear()
        # SQLite leaves the old file's write-ahead log and index at the path when the
        # file went under it; a new file would read them as its own. Only those the
        # old file had: another process may have made the new file and its log
        # already (removing that lost what the process had just saved).
        for suffix, old_file in zip(("-wal", "-shm"), self._logs, strict=True):
            if (
                old_file is not None
                and _identity(Path(f"{self.path}{suffix}")) == old_file
            ):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(f"{self.path}{suffix}")
        self.generation += 1
        self._file = None

    def _open(self) -> sqlite3.Connection:
        # called with self._lock held
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # check_same_thread=False so a change of file can close every thread's
        # connection; each connection is otherwise used by its own thread only.
        conn = sqlite3.connect(
            self.path,
            timeout=self.busy_timeout,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            conn.row_factory = sqlite3.Row
            _set_wal(conn, self.busy_timeout)
            conn.execute("PRAGMA synchronous=NORMAL")
            # Deleted rows are overwritten with zeros, not left in free space (see
            # sqlite_erase.erase_step).
            conn.execute("PRAGMA secure_delete=ON")
            add_functions(conn)  # what the turn index's triggers compute words with
            if self._file is None:
                self._migrate(conn)
                self._file = _identity(self.path)
                self._logs = (
                    _identity(Path(f"{self.path}-wal")),
                    _identity(Path(f"{self.path}-shm")),
                )
        except BaseException:
            conn.close()
            raise
        self._local.conn = conn
        self._local.generation = self.generation
        self._connections.append(conn)
        return conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        # BEGIN IMMEDIATE takes the write lock first, so two processes opening a new
        # file at once migrate it once.
        conn.execute("BEGIN IMMEDIATE")
        try:
            found = migrate(conn, self.path)
            if found is not None:
                self._migrated_from = found
            conn.execute("COMMIT")
        except BaseException:
            rollback(conn)
            raise

    def upgrade_in_background(self, rows: int) -> None:
        """Upgrade the file (of an older schema, holding ``rows`` exchanges) on a
        thread of its own; ``upgrading`` says why the file is not usable until then."""
        self.upgrading = (
            f"the memory file {self.path} ({rows} exchanges) is being upgraded to schema "
            f"version {SCHEMA_VERSION}; memory is back when that is done"
        )
        logger.warning(
            "memory: %s holds %d exchanges of an older schema version; upgrading it to "
            "version %d on a thread of its own (about %.0f s); calls go on without memory "
            "until it is done (to upgrade such a file before the worker starts: "
            "uv run memory_admin.py upgrade)",
            self.path,
            rows,
            SCHEMA_VERSION,
            rows * UPGRADE_SECONDS_PER_ROW,
        )
        threading.Thread(
            target=self._upgrade, name="memory-upgrade", daemon=True
        ).start()

    def _upgrade(self) -> None:
        started = time.monotonic()
        said = -UPGRADE_WAIT_LOG_EVERY  # when the last "waits" line was logged
        while not self.closed:
            try:
                self.conn()  # the first connection checks and migrates the file
                break
            except FAIL_OPEN as exc:
                if isinstance(exc, (sqlite3.Error, OSError)) and passing(exc):
                    # Another process upgrades it (its write lock), or the disk is full:
                    # wait our turn; its upgrade, once committed, leaves ours nothing to do.
                    # Say so now and then: a full disk can last, and memory stays off.
                    if time.monotonic() - said >= UPGRADE_WAIT_LOG_EVERY:
                        said = time.monotonic()
                        logger.warning(
                            "memory: the upgrade of %s waits (%s); trying again every "
                            "%.1f s, calls go on without memory meanwhile",
                            self.path,
                            exc,
                            UPGRADE_RETRY_AFTER,
                        )
                    time.sleep(UPGRADE_RETRY_AFTER)
                    continue
                # SchemaMismatchError, a broken file: say it, and keep refusing reads and writes
                self.upgrading = (
                    f"the memory file {self.path} could not be upgraded: {exc}"
                )
                logger.error("memory: %s", self.upgrading)
                return
        self.upgrading = None
        if self._migrated_from is None:  # another process did it while this one waited
            logger.info(
                "memory: %s was upgraded to schema version %d by another process; memory is back",
                self.path,
                SCHEMA_VERSION,
            )
            return
        logger.info(
            "memory: %s upgraded to schema version %d in %.1f s; memory is back",
            self.path,
            SCHEMA_VERSION,
            time.monotonic() - started,
        )

    def close(self) -> None:
        """Close every thread's connection (after the threads' work is done)."""
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()


def rollback(conn: sqlite3.Connection) -> None:
    """ROLLBACK the transaction ``conn`` has open, if it still has one."""
    # SQLite has already rolled back after some errors (a full disk: SQLITE_FULL,
    # SQLITE_IOERR); a ROLLBACK then raises "no transaction is active", which would
    # hide the error callers tell apart by its code (passing).
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def passing(exc: BaseException) -> bool:
    """Whether ``exc`` is one of ``PASSING`` (or one of their extended codes)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF in PASSING


def _identity(path: Path) -> tuple[int, int] | None:
    """Which file is at ``path`` (device, inode), None when there is none."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def _set_wal(conn: sqlite3.Connection, busy_timeout: float) -> None:
    # Switching a new file to WAL takes a lock the busy handler does not wait for, so
    # worker processes starting together on a fresh file would see "database is
    # locked" at once: wait out the other process's switch here.
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)
