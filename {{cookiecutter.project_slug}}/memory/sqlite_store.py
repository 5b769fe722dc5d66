"""The embedded memory store: one SQLite file on the worker machine (the default).

``MEMORY_URL=sqlite:///data/memory.db`` (three slashes: a path relative to the
project's root, ``places.project_dir``; four for an absolute path,
``sqlite:////data/memory.db``; unset: ``memory.db`` in the data folder). Exchanges,
facts and call summaries, scoped by caller id; search is SQLite FTS5 with BM25
ranking. Implements ``MemoryStore`` (``store``); ``records`` and ``facts`` have the
types and rules.

Every database call runs on a worker thread, never on the event loop: one thread
for writes (SQLite allows one writer at a time anyway; saves that wait for it are
written together, in one transaction) and a few for reads, so one
call's slow query never holds up another call's recall. WAL mode and a busy
timeout make several worker processes (LiveKit runs each job in its own process)
safe on one file.

This module is the store: when each operation runs and how long it may take. Its
parts: ``sqlite_file`` (the file's connections, a file replaced, the upgrade of a
big one), ``sqlite_schema`` (migrations and checks), ``sqlite_index`` (what the turn
index holds, and the triggers that keep it), ``sqlite_search`` (FTS5 terms and
ranking), ``sqlite_queries`` (the SQL of each operation) and ``sqlite_erase`` (the
erasure after a forget, in steps that let other writers in).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

from . import sqlite_queries as queries
from .errors import FAIL_OPEN, InvalidStoreUrlError, StoreUnavailableError
from .facts import Fact, Remembered
from .limits import RECALL_EXCHANGES, WRITE_TIMEOUT
from .places import local_path
from .records import Exchange, Recall, Summary
from .sqlite_erase import Erasure
from .sqlite_file import SQLiteFile, passing, rollback
from .sqlite_index import add_functions, index_turns
from .sqlite_queries import LATEST_SUMMARIES
from .sqlite_schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
    apply_migrations,
    rows_to_upgrade,
)
from .sqlite_search import (
    ROWS_FOUND,
    caller_key,
    caller_prefix,
    fts_query,
    indexed_words,
    search_terms,
)
from .store import PURGEABLE

# What other code reads here by name (tests, benchmarks, recipes): the schema's and
# the search's own names live in their modules, and are patched there.
__all__ = [
    "BUSY_TIMEOUT",
    "LATEST_SUMMARIES",
    "MIGRATIONS",
    "READERS",
    "ROWS_FOUND",
    "SCHEMA_VERSION",
    "UPGRADE_IN_OPEN_ROWS",
    "SQLiteStore",
    "add_functions",
    "apply_migrations",
    "caller_key",
    "caller_prefix",
    "fts_query",
    "index_turns",
    "indexed_words",
    "open_store",
    "path_of",
    "search_terms",
]

T = TypeVar("T")

logger = logging.getLogger("memory")


BUSY_TIMEOUT = 2.0
"""Seconds a save waits for another process's write lock before failing (it is
retried by ExchangeWriter)."""
READERS = 4
"""Reader threads per process: calls whose queries are slow (a cold disk) hold at
most this many; other calls' recalls run on the rest."""
UPGRADE_IN_OPEN_ROWS = 4_000
"""Most exchanges a file of an older schema version may hold for ``open`` to upgrade
it before it returns. ``open`` runs in a job process's prewarm, and LiveKit kills a
process whose prewarm takes over 10 s (livekit-agents' ``initialize_process_timeout``
default), which would roll the upgrade back in every new process, forever: at the
slowest upgrade measured (``sqlite_file.UPGRADE_SECONDS_PER_ROW_LOADED``) this many
take under a third of it. A bigger file is upgraded on a thread of its own (or
beforehand by ``memory_admin.py upgrade``): ``open`` returns at once, reads and writes
raise ``StoreUnavailableError`` until it is done (calls go on without memory; their
exchanges wait in ``ExchangeWriter``), and a process killed meanwhile leaves
the file as it was (one transaction) for the next one to upgrade."""


def open_store(url: str, *, create: bool = True) -> SQLiteStore:
    """Open (creating or migrating) the file a ``sqlite:`` URL names; with
    ``create=False`` (an operator's read commands) a file that is not there is
    refused with ``StoreUnavailableError`` naming its path, and nothing is created.

    Synchronous: call it once per process, before any call starts. Raises
    ``InvalidStoreUrlError`` for a URL that names no file, ``SchemaMismatchError`` for a file
    from a newer version of this code or of another application, and
    ``StoreUnavailableError`` for a file that cannot be opened or written; each names
    the path. A file another process holds locked past ``BUSY_TIMEOUT`` (migrating
    it, or in a long write), or on a full disk, is not an error: it is opened when
    first used, and calls meanwhile go on without memory. A file of an older schema
    version holding more than ``UPGRADE_IN_OPEN_ROWS`` exchanges is upgraded on a
    thread of its own after this returns (see there)."""
    path = path_of(url)
    if not create and not path.is_file():
        raise StoreUnavailableError(
            f"no memory file at {path}: check MEMORY_URL (a read never creates the file)"
        )
    return SQLiteStore.open(path)


def path_of(url: str) -> Path:
    """The file a ``sqlite:`` URL names: ``sqlite:///data/memory.db`` is relative to
    the project's root (``places.project_dir``), ``sqlite:////abs/memory.db`` is
    absolute. Query strings are
    not accepted (nothing here reads them)."""
    parts = urlsplit(url)
    # "sqlite:memory.db" has no "/" before its path: cutting the first character as
    # below would open "emory.db".
    if (
        parts.scheme.split("+")[0] != "sqlite"
        or parts.netloc
        or parts.query
        or parts.fragment
        or not parts.path.startswith("/")
    ):
        raise InvalidStoreUrlError(
            f"{url!r} is not a sqlite URL such as sqlite:///data/memory.db (relative "
            "to the project's root) or sqlite:////data/memory.db (absolute)"
        )
    path = unquote(parts.path)[1:]  # the path after "sqlite:///"
    if not path or path.endswith("/"):
        raise InvalidStoreUrlError(f"{url!r} names no file")
    return local_path(path)


class SQLiteStore:
    """The embedded store: one SQLite file, safe to share between worker processes.

    Open it once per process (``open``) and share it between the calls that process
    runs. See ``MemoryStore`` for what each method promises. Raises
    ``sqlite3.Error`` subclasses for database failures and ``StoreUnavailableError`` once
    closed.
    """

    def __init__(self, path: str | Path, *, busy_timeout: float = BUSY_TIMEOUT) -> None:
        self.path = Path(path)
        self._file = SQLiteFile(self.path, busy_timeout)
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="memory-write")
        self._saves = _SaveBatches(self._writer, self._file)
        self._readers = ThreadPoolExecutor(READERS, thread_name_prefix="memory-read")
        self._erasure = Erasure(self._writer, self._file)  # after a forget, a purge

    @property
    def generation(self) -> int:
        """How many times the memory file was deleted or replaced while in use (what
        was written before each time is not in the file now); see
        ``store_generation``."""
        return self._file.generation

    @property
    def upgrading(self) -> bool:
        """Whether a big file of an older schema is being upgraded in the background
        (reads and writes raise ``StoreUnavailableError`` meanwhile, see ``open``)."""
        return self._file.upgrading is not None

    @classmethod
    def open(
        cls, path: str | Path, *, upgrade_rows: float | None = None
    ) -> SQLiteStore:
        # upgrade_rows: UPGRADE_IN_OPEN_ROWS unless given (memory_admin's upgrade: any)
        store = cls(path)
        rows = rows_to_upgrade(store.path, BUSY_TIMEOUT)
        if rows > (UPGRADE_IN_OPEN_ROWS if upgrade_rows is None else upgrade_rows):
            store._file.upgrade_in_background(rows)
            return store
        try:
            store._file.conn()  # the first connection checks and migrates the file
        except (sqlite3.Error, OSError) as exc:
            if not passing(exc):
                raise StoreUnavailableError(
                    f"cannot use {store.path} as the memory file: {exc}"
                ) from exc
            # Locked past the busy timeout by another process (migrating the file at
            # an upgrade, seconds for a big one; a long write), or the disk is full:
            # conditions that pass. Failing here would fail this job process's
            # prewarm, and LiveKit would give the call no agent; instead the first use
            # checks and migrates the file, and calls meanwhile go on without memory.
            logger.warning(
                "memory: %s cannot be opened now (%s); calls go on without memory, "
                "and it is opened when first used",
                store.path,
                exc,
            )
        return store

    def _usable(self) -> None:
        if self._file.closed:
            raise StoreUnavailableError("the memory store is closed")
        if self._file.upgrading is not None:
            raise StoreUnavailableError(self._file.upgrading)

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        self._usable()
        return await asyncio.get_running_loop().run_in_executor(
            self._readers, fn, *args
        )

    def _query(self, fn: Callable[..., T], *args: Any) -> Awaitable[T]:
        # fn(connection, *args) on a reader thread, with that thread's connection
        return self._read(lambda: fn(self._file.conn(), *args))

    async def _write(
        self, fn: Callable[..., T], *args: Any, timeout: float | None = None
    ) -> T:
        """Run ``fn(connection, *args)`` on the writer thread. With ``timeout``, it
        runs within that many seconds or not at all (TimeoutError): it does not start
        late, and waits for another process's lock only as long as is left."""
        self._usable()
        deadline = None if timeout is None else time.monotonic() + timeout
        busy_timeout = self._file.busy_timeout

        def run() -> T:
            conn = self._file.conn()
            if deadline is None:
                return fn(conn, *args)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    "the write was not started in time; nothing was written"
                )
            conn.execute(f"PRAGMA busy_timeout = {int(left * 1000)}")
            try:
                return fn(conn, *args)
            finally:
                conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")

        self._saves.close()  # saves asked for after this one are written after it
        return await asyncio.get_running_loop().run_in_executor(self._writer, run)

    # -- writes --

    async def save(self, exchange: Exchange) -> None:
        self._usable()
        await self._saves.save(exchange)

    async def remember(
        self, caller_id: str, fact: Fact, *, timeout: float = WRITE_TIMEOUT
    ) -> Remembered:
        return await self._write(queries.remember, caller_id, fact, timeout=timeout)

    async def save_summary(self, caller_id: str, call_id: str, text: str) -> None:
        await self._write(queries.save_summary, caller_id, call_id, text, time.time())

    async def forget(
        self,
        caller_id: str,
        *,
        kind: str | None = None,
        value: str | None = None,
        call_id: str | None = None,
        timeout: float = WRITE_TIMEOUT,
    ) -> int:
        n = await self._write(
            queries.forget, caller_id, kind, value, call_id, timeout=timeout
        )
        if n:
            self._erasure.soon(index=kind is None)
        return n

    async def purge(self, *, before: float, what: str) -> int:
        if what not in PURGEABLE:
            raise ValueError(
                f"what must be one of {', '.join(PURGEABLE)}, not {what!r}"
            )
        n = await self._write(queries.purge, what, before)
        if n:
            self._erasure.soon(index=what == "exchanges")
        return n

    # -- reads --

    async def profile(self, caller_id: str) -> Recall:
        return await self._query(queries.recall, caller_id, "", None, 0)

    async def recall(
        self,
        caller_id: str,
        query: str,
        *,
        limit: int = RECALL_EXCHANGES,
        exclude_call_id: str | None = None,
    ) -> Recall:
        return await self._query(
            queries.recall, caller_id, query, exclude_call_id, limit
        )

    async def history(self, caller_id: str) -> list[Fact]:
        return await self._query(queries.history, caller_id)

    async def erased_at(self, caller_id: str) -> float:
        return await self._query(queries.erased_at, caller_id)

    async def exchanges(
        self, caller_id: str, *, call_id: str | None = None
    ) -> list[Exchange]:
        return await self._query(queries.exchanges, caller_id, call_id)

    async def summaries(self, caller_id: str) -> list[Summary]:
        return await self._query(queries.summaries, caller_id)

    async def callers(self, *, after: str = "", limit: int = 100) -> list[str]:
        return await self._query(queries.callers, after, limit)

    async def stats(self) -> dict[str, int]:
        return await self._query(queries.stats)

    async def close(self) -> None:
        if self._file.closed:
            return
        await self._erasure.wait()  # the erasure after a forget, to its end
        self._file.closed = True
        loop = asyncio.get_running_loop()
        for executor in (self._writer, self._readers):
            await loop.run_in_executor(None, executor.shutdown, True)
        self._file.close()


class _SaveBatches:
    """Saves asked for while the writer thread is busy, written together in one
    transaction when its turn comes (each in order, after every write asked for
    before it and before every one asked for after it): a transaction's fixed cost
    (the search index's new segment and its structure record, the WAL pages each
    commit writes) is paid once for all of them. If the transaction fails on one
    save's error, each is tried alone, so that error is its own; one of the file's
    (``sqlite3.OperationalError``: locked, full, I/O) is every save's at once."""

    def __init__(self, writer: ThreadPoolExecutor, file: SQLiteFile) -> None:
        self._writer = writer
        self._file = file
        self._lock = threading.Lock()
        self._open: list[tuple[Exchange, asyncio.Future[None]]] | None = None

    def save(self, exchange: Exchange) -> asyncio.Future[None]:
        future = asyncio.get_running_loop().create_future()
        with self._lock:
            if self._open is None:
                self._open = []
                self._writer.submit(self._write, self._open)
            self._open.append((exchange, future))
        return future

    def close(self) -> None:
        """A write of another kind is queued next: later saves go after it."""
        with self._lock:
            self._open = None

    def _write(self, batch: list[tuple[Exchange, asyncio.Future[None]]]) -> None:
        with self._lock:  # nothing joins it from now on
            if self._open is batch:
                self._open = None
        outcomes: list[BaseException | None]
        try:
            conn = self._file.conn()
            if len(batch) == 1:
                outcomes = [_outcome(queries.save, conn, batch[0][0])]
            else:
                outcomes = _together(conn, [e for e, _ in batch])
        except FAIL_OPEN as exc:  # the file could not be opened
            outcomes = [exc] * len(batch)
        for (_, future), outcome in zip(batch, outcomes, strict=True):
            with contextlib.suppress(RuntimeError):  # its loop closed: no one waits
                future.get_loop().call_soon_threadsafe(_settle, future, outcome)


def _together(conn: sqlite3.Connection, batch: list[Exchange]) -> list[Any]:
    # every save of ``batch`` in one transaction, or, if that fails, each alone
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for e in batch:
                queries.save(conn, e)
            conn.execute("COMMIT")
        except BaseException:
            rollback(conn)
            raise
        return [None] * len(batch)
    except sqlite3.OperationalError as exc:
        # the file's, not one save's (locked past the busy timeout, full, I/O):
        # each alone would wait the busy timeout again, one after the other (a
        # close behind 138 of them took 277 s while another process held the lock)
        return [exc] * len(batch)
    except sqlite3.Error:
        return [_outcome(queries.save, conn, e) for e in batch]


def _outcome(fn: Callable[..., Any], *args: Any) -> BaseException | None:
    try:
        fn(*args)
    except FAIL_OPEN as exc:  # handed to the save's caller
        return exc
    return None


def _settle(future: asyncio.Future[None], outcome: BaseException | None) -> None:
    if future.cancelled():
        return
    if outcome is None:
        future.set_result(None)
    else:
        future.set_exception(outcome)
