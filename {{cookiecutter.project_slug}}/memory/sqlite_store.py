"""The embedded memory store: one SQLite file on the worker machine (the default).

``MEMORY_URL=sqlite:///data/memory.db`` (three slashes: a path relative to the
project's root, ``places.project_dir``; four for an absolute path,
``sqlite:////data/memory.db``; unset: ``memory.db`` in the data folder). Exchanges,
facts and call summaries, scoped by caller id; search is SQLite FTS5 with BM25
ranking. Implements ``MemoryStore``; memory.py has the types and rules.

Every database call runs on a worker thread, never on the event loop: one thread
for writes (SQLite allows one writer at a time anyway) and a few for reads, so one
call's slow query never holds up another call's recall. WAL mode and a busy
timeout make several worker processes (LiveKit runs each job in its own process)
safe on one file.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

from .dates import date_words
from .errors import (
    FAIL_OPEN,
    InvalidStoreUrlError,
    SchemaMismatchError,
    StoreUnavailableError,
)
from .facts import Fact, Remembered, matching_facts, reconcile
from .limits import RECALL_EXCHANGES, RECENT_SUMMARIES, WRITE_TIMEOUT
from .places import local_path
from .records import Exchange, Recall, Summary
from .store import PURGEABLE
from .words import query_words, search_words

T = TypeVar("T")

logger = logging.getLogger("memory")


BUSY_TIMEOUT = 2.0
"""Seconds a save waits for another process's write lock before failing (it is
retried by ExchangeWriter)."""
READERS = 4
"""Reader threads per process: calls whose queries are slow (a cold disk) hold at
most this many; other calls' recalls run on the rest."""

CALLER_PREFIX_DIGITS = 12


def caller_prefix(caller_id: str) -> str:
    """What every indexed word of the caller starts with: 12 decimal digits from the
    SHA-256 of the caller id. Each caller's words are then their own FTS5 terms, so a
    search reads only that caller's rows and BM25 weighs words by how common they
    are in that caller's memory; the time a recall takes follows the caller, not the
    file. Digits only: the porter stemmer treats them as consonants, so a prefixed
    word stems like the word alone. (Two callers whose prefixes collide share terms;
    rows are still filtered by caller id.)"""
    number = int.from_bytes(hashlib.sha256(caller_id.encode()).digest()[:8], "big")
    return f"{number % 10**CALLER_PREFIX_DIGITS:0{CALLER_PREFIX_DIGITS}d}"


def indexed_words(caller_id: str, text: str) -> str:
    """The text FTS5 indexes for ``text`` of ``caller_id``: its search words
    (``search_words``: words, and character pairs for Chinese, Japanese,
    Korean and Thai), each behind the caller's prefix, joined by spaces."""
    prefix = caller_prefix(caller_id)
    return " ".join(prefix + w for w in search_words(text))


def fts_query(text: str, caller_id: str) -> str | None:
    """Turn what the caller said into an FTS5 query over ``caller_id``'s words: its
    content words (``query_words``), each behind the caller's prefix and
    quoted, joined by OR (so no word is ever read as FTS5 syntax). None when nothing
    is left to search for."""
    return " OR ".join(_terms(query_words(text), caller_id)) or None


def _terms(words: list[str], caller_id: str) -> list[str]:
    prefix = caller_prefix(caller_id)
    return [f'"{prefix}{w}"' for w in words]


MAX_RANKED = 1000
"""Most rows one search ranks with BM25. FTS5 scores every matched row before it
sorts, so a caller with thousands of exchanges whose question holds a word they say
in most of them would pay for all of them (about 0.6 us of CPU each); which rows are
matched is chosen within this bound instead (``search_terms``)."""


def search_terms(
    conn: sqlite3.Connection, text: str, caller_id: str
) -> tuple[str | None, int]:
    """The FTS5 query that searches ``caller_id``'s turns (``turns_fts``, where recall
    ranks) for ``text`` (None when none of its words is in them), and the lowest
    rowid worth ranking (0: all).

    The query's words (``query_words``) are counted in the caller's own rows
    (each caller's words are their own terms, see ``caller_prefix``; a count stops at
    MAX_RANKED + 1, so counting is bounded too). Rarest first, words *select* rows
    while the rows they select together stay within MAX_RANKED; the others, common in
    this caller's memory (a low inverse document frequency: they cost the most and
    tell rows apart the least), only *rank* the selected rows:
    ``(s1 OR s2) AND (s1 OR s2 OR c1 OR c2)`` (BM25 counts each selecting word twice).
    The rarest word is always selecting, so a question of only common words still
    finds something: then the newest MAX_RANKED rows that hold it are ranked (rowids
    grow with time), found by walking the index without scoring."""
    terms = _terms(query_words(text), caller_id)
    if not terms:
        return None, 0
    capped = (
        "(SELECT count(*) FROM (SELECT 1 FROM turns_fts WHERE turns_fts MATCH ? "
        f"LIMIT {MAX_RANKED + 1}))"
    )
    counts = conn.execute(
        f"SELECT {', '.join([capped] * len(terms))}", terms
    ).fetchone()
    select: list[str] = []
    rank: list[str] = []
    rows = 0
    for n, i in sorted((n, i) for i, n in enumerate(counts) if n):
        if select and rows + n > MAX_RANKED:
            rank.append(terms[i])
        else:
            select.append(terms[i])
            rows += n
    if not select:
        return None, 0
    selecting = " OR ".join(select)
    floor = 0
    if rows > MAX_RANKED:
        oldest = conn.execute(
            "SELECT rowid FROM turns_fts WHERE turns_fts MATCH ? "
            "ORDER BY rowid DESC LIMIT 1 OFFSET ?",
            (selecting, MAX_RANKED - 1),
        ).fetchone()
        floor = oldest[0] if oldest else 0
    if rank:
        return f"({selecting}) AND ({selecting} OR {' OR '.join(rank)})", floor
    return selecting, floor


# Each entry moves a file from version N to N+1; `PRAGMA user_version` holds N: SQL,
# or a function for a step that needs Python. Append, never edit: files in the field
# are at every version.
MIGRATIONS: list[str | Callable[[sqlite3.Connection], None]] = [
    """
    CREATE TABLE exchanges (
        key            TEXT PRIMARY KEY,
        caller_id      TEXT NOT NULL,
        caller_key     TEXT NOT NULL,
        call_id        TEXT NOT NULL,
        user_text      TEXT NOT NULL,
        assistant_text TEXT NOT NULL,
        interrupted    INTEGER NOT NULL DEFAULT 0,
        item_ids       TEXT NOT NULL,
        created_at     REAL NOT NULL
    );
    CREATE INDEX exchanges_by_caller ON exchanges (caller_id, created_at);
    -- External-content FTS5 index, kept in step by triggers, so deleting a row
    -- also deletes its index entries. caller_key (a hash of the caller id, one
    -- token) is indexed too: matching it narrows a search to one caller inside the
    -- index, so search time does not grow with the number of callers.
    CREATE VIRTUAL TABLE exchanges_fts USING fts5 (
        caller_key, user_text, assistant_text,
        content='exchanges', content_rowid='rowid',
        tokenize='porter unicode61 remove_diacritics 2'
    );
    CREATE TRIGGER exchanges_ai AFTER INSERT ON exchanges BEGIN
        INSERT INTO exchanges_fts (rowid, caller_key, user_text, assistant_text)
        VALUES (new.rowid, new.caller_key, new.user_text,
                new.assistant_text);
    END;
    CREATE TRIGGER exchanges_ad AFTER DELETE ON exchanges BEGIN
        INSERT INTO exchanges_fts (exchanges_fts, rowid, caller_key, user_text, assistant_text)
        VALUES ('delete', old.rowid, old.caller_key,
                old.user_text, old.assistant_text);
    END;
    CREATE TRIGGER exchanges_au AFTER UPDATE ON exchanges BEGIN
        INSERT INTO exchanges_fts (exchanges_fts, rowid, caller_key, user_text, assistant_text)
        VALUES ('delete', old.rowid, old.caller_key,
                old.user_text, old.assistant_text);
        INSERT INTO exchanges_fts (rowid, caller_key, user_text, assistant_text)
        VALUES (new.rowid, new.caller_key, new.user_text,
                new.assistant_text);
    END;
    CREATE TABLE facts (
        caller_id  TEXT NOT NULL,
        kind       TEXT NOT NULL,
        value      TEXT NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (caller_id, kind)
    );
    CREATE TABLE summaries (
        caller_id  TEXT NOT NULL,
        call_id    TEXT NOT NULL,
        text       TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (caller_id, call_id)
    );
    """,
    # 2: search by each caller's own words (see caller_prefix) and by character pairs
    # for Chinese, Japanese, Korean and Thai (see search_words).
    lambda conn: _index_words_per_caller(conn),
    # 3: facts keep dates and history, and a kind may hold several values
    # (reconcile decides which), so (caller_id, kind) is no longer unique.
    """
    CREATE TABLE facts_v2 (
        caller_id   TEXT NOT NULL,
        kind        TEXT NOT NULL,
        value       TEXT NOT NULL,
        learned_at  REAL NOT NULL,
        updated_at  REAL NOT NULL,
        replaced_at REAL            -- NULL: a current value; else history
    );
    INSERT INTO facts_v2 (caller_id, kind, value, learned_at, updated_at)
        SELECT caller_id, kind, value, updated_at, updated_at FROM facts;
    DROP TABLE facts;
    ALTER TABLE facts_v2 RENAME TO facts;
    CREATE INDEX facts_by_caller ON facts (caller_id, kind);
    """,
    # 4: one search row per turn, with the turns around it and its day (see _index_turns).
    lambda conn: _index_turns(conn),
    # 5: a caller's latest summaries read from an index (LATEST_SUMMARIES).
    "CREATE INDEX summaries_by_time ON summaries (caller_id, created_at);",
    # 6: a turn's context also holds the whole exchange before it in the call.
    lambda conn: _context_from_previous_exchange(conn),
    # 7: the one-row-per-exchange index goes: recall ranks turns_fts since schema 4,
    # and its triggers still indexed every save (10 to 15 % of a save's time).
    """
    DROP TRIGGER exchanges_ai;
    DROP TRIGGER exchanges_ad;
    DROP TRIGGER exchanges_au;
    DROP TABLE exchanges_fts;
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)
TABLES = {"exchanges", "turns_fts", "facts", "summaries"}


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
        self._busy_timeout = busy_timeout
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="memory-write")
        self._readers = ThreadPoolExecutor(READERS, thread_name_prefix="memory-read")
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        # The file the connections have open, as (st_dev, st_ino); None until the
        # first connection has checked (and migrated) it. A change of file bumps
        # the generation: every connection of an older one is closed.
        self._file: tuple[int, int] | None = None
        self._generation = 0
        # Set while a big file of an older schema is upgraded after ``open`` returned
        # (``_upgrade_in_background``): why reads and writes are refused meanwhile.
        self._upgrading: str | None = None
        # The schema version this process migrated the file from (None: it found the
        # file current, e.g. another process upgraded it while this one waited).
        self._migrated_from: int | None = None

    @property
    def generation(self) -> int:
        """How many times the memory file was deleted or replaced while in use (what
        was written before each time is not in the file now); see
        ``store_generation``."""
        return self._generation

    @classmethod
    def open(cls, path: str | Path) -> SQLiteStore:
        store = cls(path)
        rows = _rows_to_upgrade(store.path)
        if rows > UPGRADE_IN_OPEN_ROWS:
            store._upgrade_in_background(rows)
            return store
        try:
            store._conn()  # the first connection checks and migrates the file
        except (sqlite3.Error, OSError) as exc:
            if not _passing(exc):
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

    # Connections are per thread: sqlite3 objects must stay on the thread that made them.
    def _conn(self) -> sqlite3.Connection:
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
            and self._local.generation == self._generation
            and self._file == _identity(self.path)
        ):
            return conn
        with self._lock:
            if conn is not None and self._local.generation == self._generation:
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
        # file went under it; the new file would read them as its own.
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(f"{self.path}{suffix}")
        self._generation += 1
        self._file = None

    def _open(self) -> sqlite3.Connection:
        # called with self._lock held
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # check_same_thread=False so a change of file can close every thread's
        # connection; each connection is otherwise used by its own thread only.
        conn = sqlite3.connect(
            self.path,
            timeout=self._busy_timeout,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            conn.row_factory = sqlite3.Row
            _set_wal(conn, self._busy_timeout)
            conn.execute("PRAGMA synchronous=NORMAL")
            # Deleted rows are overwritten with zeros, not left in free space (see _erase).
            conn.execute("PRAGMA secure_delete=ON")
            if self._file is None:
                self._migrate(conn)
                self._file = _identity(self.path)
        except BaseException:
            conn.close()
            raise
        self._local.conn = conn
        self._local.generation = self._generation
        self._connections.append(conn)
        return conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        # BEGIN IMMEDIATE takes the write lock first, so two processes opening a new
        # file at once migrate it once.
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise SchemaMismatchError(
                    f"{self.path} has memory schema version {version}, newer than this "
                    f"code's {SCHEMA_VERSION}; upgrade the agent before opening it"
                )
            tables = {t for t in _tables(conn) if not t.startswith("sqlite_")}
            if version == 0 and tables:
                # Ours sets the version in the transaction that adds its tables: a
                # file with tables and no version is another application's.
                raise SchemaMismatchError(
                    f"{self.path} is not a memory file (no memory schema version, but "
                    f"tables {', '.join(sorted(tables)[:5])}); give MEMORY_URL a file "
                    "of its own"
                )
            if version and "exchanges" not in tables:
                # another application's file: check before any migration touches it
                self._not_memory(version, {"exchanges"})
            apply_migrations(conn, version, SCHEMA_VERSION)
            if 0 < version < SCHEMA_VERSION:
                self._migrated_from = version
            missing = TABLES - _tables(conn)
            if missing:
                self._not_memory(version, missing)
            # a write now, so a read-only file fails here and not on the first call
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise

    def _not_memory(self, version: int, missing: set[str]) -> None:
        raise SchemaMismatchError(
            f"{self.path} is not a memory file (schema version {version} but no "
            f"{', '.join(sorted(missing))} table); give MEMORY_URL a file of its own"
        )

    def _upgrade_in_background(self, rows: int) -> None:
        self._upgrading = (
            f"the memory file {self.path} ({rows} exchanges) is being upgraded to schema "
            f"version {SCHEMA_VERSION}; memory is back when that is done"
        )
        logger.warning(
            "memory: %s holds %d exchanges of an older schema version; upgrading it to "
            "version %d on a thread of its own (about %.0f s); calls go on without memory "
            "until it is done",
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
        while not self._closed:
            try:
                self._conn()  # the first connection checks and migrates the file
                break
            except FAIL_OPEN as exc:
                if isinstance(exc, (sqlite3.Error, OSError)) and _passing(exc):
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
                self._upgrading = (
                    f"the memory file {self.path} could not be upgraded: {exc}"
                )
                logger.error("memory: %s", self._upgrading)
                return
        self._upgrading = None
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

    @property
    def upgrading(self) -> bool:
        """Whether a big file of an older schema is being upgraded in the background
        (reads and writes raise ``StoreUnavailableError`` meanwhile, see ``open``)."""
        return self._upgrading is not None

    def _usable(self) -> None:
        if self._closed:
            raise StoreUnavailableError("the memory store is closed")
        if self._upgrading is not None:
            raise StoreUnavailableError(self._upgrading)

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        self._usable()
        return await asyncio.get_running_loop().run_in_executor(
            self._readers, fn, *args
        )

    async def _write(
        self, fn: Callable[..., T], *args: Any, timeout: float | None = None
    ) -> T:
        """Run ``fn`` on the writer thread. With ``timeout``, it runs within that many
        seconds or not at all (TimeoutError): it does not start late, and waits for
        another process's lock only as long as is left."""
        self._usable()
        deadline = None if timeout is None else time.monotonic() + timeout

        def run() -> T:
            conn = self._conn()
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
                conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")

        return await asyncio.get_running_loop().run_in_executor(self._writer, run)

    # -- writes --

    async def save(self, exchange: Exchange) -> None:
        await self._write(_save, exchange)

    async def remember(
        self, caller_id: str, fact: Fact, *, timeout: float = WRITE_TIMEOUT
    ) -> Remembered:
        return await self._write(_remember, caller_id, fact, timeout=timeout)

    async def save_summary(self, caller_id: str, call_id: str, text: str) -> None:
        await self._write(_save_summary, caller_id, call_id, text, time.time())

    async def forget(
        self,
        caller_id: str,
        *,
        kind: str | None = None,
        value: str | None = None,
        call_id: str | None = None,
        timeout: float = WRITE_TIMEOUT,
    ) -> int:
        n = await self._write(_forget, caller_id, kind, value, call_id, timeout=timeout)
        if n:
            self._erase_soon(index=kind is None)
        return n

    def _erase_soon(self, *, index: bool) -> None:
        # Queued on the writer thread behind the committed delete, not awaited: the
        # caller hears "forgotten" as soon as no query can find the rows, and the
        # bytes are gone moments later (close() waits for it). See _erase.
        loop = asyncio.get_running_loop()
        done = loop.run_in_executor(self._writer, lambda: _erase(self._conn(), index))
        done.add_done_callback(_erase_failed)

    # -- reads --

    async def profile(self, caller_id: str) -> Recall:
        return await self._read(self._recall, caller_id, "", None, 0)

    async def recall(
        self,
        caller_id: str,
        query: str,
        *,
        limit: int = RECALL_EXCHANGES,
        exclude_call_id: str | None = None,
    ) -> Recall:
        return await self._read(self._recall, caller_id, query, exclude_call_id, limit)

    def _recall(
        self, caller_id: str, query: str, exclude_call_id: str | None, limit: int
    ) -> Recall:
        conn = self._conn()
        facts = tuple(
            _row_to_fact(r)
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
        exchanges, sides = (
            _search(conn, caller_id, match, floor, exclude_call_id, limit)
            if match
            else ((), ())
        )
        return Recall(facts, summaries, exchanges, sides)

    async def history(self, caller_id: str) -> list[Fact]:
        return await self._read(self._history, caller_id)

    def _history(self, caller_id: str) -> list[Fact]:
        rows = self._conn().execute(
            f"SELECT {FACT} FROM facts WHERE caller_id = ? AND replaced_at IS NOT NULL "
            "ORDER BY replaced_at DESC, rowid DESC",
            (caller_id,),
        )
        return [_row_to_fact(r) for r in rows]

    async def exchanges(
        self, caller_id: str, *, call_id: str | None = None
    ) -> list[Exchange]:
        return await self._read(self._exchanges, caller_id, call_id)

    def _exchanges(self, caller_id: str, call_id: str | None) -> list[Exchange]:
        rows = self._conn().execute(
            "SELECT * FROM exchanges WHERE caller_id = ? AND (? IS NULL OR call_id = ?) "
            "ORDER BY created_at, rowid",
            (caller_id, call_id, call_id),
        )
        return [_row_to_exchange(r) for r in rows]

    async def summaries(self, caller_id: str) -> list[Summary]:
        return await self._read(self._summaries, caller_id)

    def _summaries(self, caller_id: str) -> list[Summary]:
        rows = self._conn().execute(
            "SELECT call_id, text, created_at FROM summaries WHERE caller_id = ? "
            "ORDER BY created_at DESC",
            (caller_id,),
        )
        return [Summary(r["call_id"], r["text"], r["created_at"]) for r in rows]

    async def callers(self, *, after: str = "", limit: int = 100) -> list[str]:
        return await self._read(self._callers, after, limit)

    def _callers(self, after: str, limit: int) -> list[str]:
        rows = self._conn().execute(
            """SELECT caller_id FROM (
                   SELECT caller_id FROM exchanges UNION SELECT caller_id FROM facts
                   UNION SELECT caller_id FROM summaries)
               WHERE caller_id > ? ORDER BY caller_id LIMIT ?""",
            (after, limit),
        )
        return [r[0] for r in rows]

    async def purge(self, *, before: float, what: str) -> int:
        if what not in PURGEABLE:
            raise ValueError(
                f"what must be one of {', '.join(PURGEABLE)}, not {what!r}"
            )
        n = await self._write(_purge, what, before)
        if n:
            self._erase_soon(index=what == "exchanges")
        return n

    async def stats(self) -> dict[str, int]:
        return await self._read(self._stats)

    def _stats(self) -> dict[str, int]:
        conn = self._conn()
        counts = {
            t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in PURGEABLE
        }
        counts["callers"] = conn.execute(
            """SELECT count(*) FROM (SELECT caller_id FROM exchanges UNION
               SELECT caller_id FROM facts UNION SELECT caller_id FROM summaries)"""
        ).fetchone()[0]
        return counts

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        loop = asyncio.get_running_loop()
        for executor in (self._writer, self._readers):
            await loop.run_in_executor(None, executor.shutdown, True)
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()


TURN_WEIGHT = 1.0
CONTEXT_WEIGHT = 0.5
DAY_WEIGHT = 1.0
"""BM25 weights of a turn's own words, of the turns next to it and of its day's
words (``turns_fts``; see _index_turns)."""
TURN_RANK = f"bm25(turns_fts, {TURN_WEIGHT}, {CONTEXT_WEIGHT}, {DAY_WEIGHT})"
"""How recall orders the turns it matched (FTS5's bm25: lower is better)."""
SIDES = ("caller", "reply")


LATEST_SUMMARIES = """SELECT call_id, text, created_at FROM summaries WHERE caller_id = ?
    ORDER BY created_at DESC LIMIT ?"""
"""The caller's newest call summaries, read from the summaries_by_time index: without
it every recall sorted all of a caller's summaries to take 3 (a caller with 10,000
exchanges has hundreds; 0.1 ms of each recall for 1,000)."""

ROWS_FOUND = """SELECT rowid AS rid, * FROM exchanges
    WHERE rowid IN ({}) AND +caller_id = ? AND call_id IS NOT ?"""
"""The rows a search found, by rowid. "+caller_id" keeps SQLite from using the
exchanges_by_caller index here: where ANALYZE saw few rows per caller, it would walk
all of a big caller's rows (10,000: twice the time of the whole search) to find 16."""


def _search(
    conn: sqlite3.Connection,
    caller_id: str,
    match: str,
    floor: int,
    exclude_call_id: str | None,
    limit: int,
    order: str = TURN_RANK,
) -> tuple[tuple[Exchange, ...], tuple[str, ...]]:
    # Rank turns in the index alone, by ``order`` (TURN_RANK; the kit's
    # benchmarks/ranking_experiments.py tries others; rowid = exchange rowid * 2 +
    # side; rows from ``floor`` on, see search_terms), then read only the best
    # exchanges' rows (not every matched row) and drop the current call's; ask for
    # more if that left fewer than ``limit`` exchanges. Each exchange keeps the sides that ranked
    # before the limit was reached. An exchange of the same words as a better-ranked
    # one is left out (a fixed greeting saved as every call's opening would otherwise
    # take every place).
    want = limit * 3
    while True:
        turns = [
            r[0]
            for r in conn.execute(
                f"""SELECT rowid FROM turns_fts WHERE turns_fts MATCH ? AND rowid >= ?
                    ORDER BY {order} LIMIT ?""",
                (match, floor, want),
            )
        ]
        ids = list(dict.fromkeys(t >> 1 for t in turns))
        rows = {
            r["rid"]: r
            for r in conn.execute(
                ROWS_FOUND.format(",".join("?" * len(ids))),
                (*ids, caller_id, exclude_call_id),
            )
        }
        best: dict[tuple[str, str], int] = {}  # words -> their best-ranked exchange
        for t in turns:
            if t >> 1 in rows:
                row = rows[t >> 1]
                best.setdefault((row["user_text"], row["assistant_text"]), t >> 1)
        kept = set(best.values())
        sides: dict[int, set[str]] = {}
        for n, t in enumerate(t for t in turns if t >> 1 in kept):
            # an exchange shows the sides among the best ``limit`` turns: a side found
            # further down does not take room before better matches
            if t >> 1 not in sides and len(sides) < limit:
                sides[t >> 1] = {SIDES[t & 1]}
            elif t >> 1 in sides and n < limit:
                sides[t >> 1].add(SIDES[t & 1])
        if len(sides) == limit or len(turns) < want:
            return (
                tuple(_row_to_exchange(rows[i]) for i in sides),
                tuple(next(iter(s)) if len(s) == 1 else "both" for s in sides.values()),
            )
        want *= 4


# -- SQL run on the writer thread ----------------------------------------------------


def _save(conn: sqlite3.Connection, e: Exchange) -> None:
    conn.execute(
        """INSERT INTO exchanges (key, caller_id, caller_key, call_id, user_text,
                                  assistant_text, interrupted, item_ids, created_at,
                                  user_words, reply_words, day_words)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT (key) DO UPDATE SET
               user_text = excluded.user_text,
               assistant_text = excluded.assistant_text,
               interrupted = excluded.interrupted,
               item_ids = excluded.item_ids,
               user_words = excluded.user_words,
               reply_words = excluded.reply_words
           WHERE user_text IS NOT excluded.user_text
              OR assistant_text IS NOT excluded.assistant_text
              OR interrupted IS NOT excluded.interrupted
              OR item_ids IS NOT excluded.item_ids""",
        (
            e.key,
            e.caller_id,
            caller_key(e.caller_id),
            e.call_id,
            e.user_text,
            e.assistant_text,
            int(e.interrupted),
            json.dumps(list(e.item_ids)),
            e.created_at,
            indexed_words(e.caller_id, e.user_text),
            indexed_words(e.caller_id, e.assistant_text),
            indexed_words(e.caller_id, date_words(e.created_at)),
        ),
    )


def _remember(conn: sqlite3.Connection, caller_id: str, f: Fact) -> Remembered:
    # Read and write in one transaction: BEGIN IMMEDIATE holds the write lock, so
    # another process cannot add a value between the read and the write.
    conn.execute("BEGIN IMMEDIATE")
    try:
        held = {
            r["rowid"]: _row_to_fact(r)
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
        _rollback(conn)
        raise
    return change.remembered


def _save_summary(
    conn: sqlite3.Connection, caller_id: str, call_id: str, text: str, at: float
) -> None:
    conn.execute(
        """INSERT INTO summaries (caller_id, call_id, text, created_at) VALUES (?, ?, ?, ?)
           ON CONFLICT (caller_id, call_id) DO UPDATE SET text = excluded.text""",
        (caller_id, call_id, text, at),
    )


def _forget(
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
                found = matching_facts([_row_to_fact(r) for r in rows], kind, value)
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
        n = 0
        for table, where, args in deletes:
            sql = f"DELETE FROM {table} WHERE caller_id = ? AND {where}"
            n += conn.execute(sql, (caller_id, *args)).rowcount
        conn.execute("COMMIT")
    except BaseException:
        _rollback(conn)
        raise
    return n


def _purge(conn: sqlite3.Connection, what: str, before: float) -> int:
    column = "updated_at" if what == "facts" else "created_at"
    return conn.execute(f"DELETE FROM {what} WHERE {column} < ?", (before,)).rowcount


def _erase(conn: sqlite3.Connection, index: bool) -> None:
    """Remove the bytes of rows already deleted from every file the store writes.

    secure_delete (set on every connection) zeroes a deleted row where it lay, but
    FTS5 keeps the words of deleted exchanges in its index segments until they are
    merged (SQLite 3.40 has no FTS5 secure-delete option), and the WAL file holds
    earlier versions of every changed page until a checkpoint. So: 'optimize' (one
    merge of the whole index: the old segments are freed, and zeroed) and a TRUNCATE
    checkpoint (pages back into the database, the WAL cut to zero bytes).

    Cost: 'optimize' rewrites the whole search index, about 19 ms per 1,000 stored
    exchanges (measured with the two indexes of schemas 4 to 6; schema 7 has one),
    holding the write lock (other writers wait, up to their busy timeout, then
    retry); the checkpoint waits for readers in other processes up to
    BUSY_TIMEOUT. 0 copies of a forgotten word are left (tests/test_sqlite_erase.py;
    benchmarks/forget_erase.py in the kit has the figures and why each step is needed)."""
    if index:
        conn.execute("INSERT INTO turns_fts (turns_fts) VALUES ('optimize')")
    busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
    if busy:
        raise sqlite3.OperationalError(
            "a reader held the WAL past the busy timeout; forgotten rows' earlier page "
            "versions stay in the -wal file until the next checkpoint"
        )


def _erase_failed(done: Any) -> None:
    if not done.cancelled() and done.exception() is not None:
        logger.warning(
            "memory: forgotten rows are deleted, not yet erased: %r", done.exception()
        )


def caller_key(caller_id: str) -> str:
    """One FTS token per caller: 'k' + 20 hex digits of the id's SHA-256 (a caller
    id's '@', '+' and '.' would otherwise split it into several tokens)."""
    return "k" + hashlib.sha256(caller_id.encode()).hexdigest()[:20]


FACT = "kind, value, updated_at, learned_at, replaced_at"


def _row_to_fact(r: sqlite3.Row) -> Fact:
    return Fact(
        r["kind"], r["value"], r["updated_at"], r["learned_at"], r["replaced_at"]
    )


def _row_to_exchange(r: sqlite3.Row) -> Exchange:
    return Exchange(
        key=r["key"],
        caller_id=r["caller_id"],
        call_id=r["call_id"],
        user_text=r["user_text"],
        assistant_text=r["assistant_text"],
        interrupted=bool(r["interrupted"]),
        item_ids=_item_ids(r["item_ids"]),
        created_at=r["created_at"],
    )


def _item_ids(stored: Any) -> tuple[str, ...]:
    # LiveKit's item ids, kept for reference only: a value that is no JSON list (a
    # hand edit, another program) must not fail the recall of every other row.
    try:
        ids = json.loads(stored)
    except (TypeError, ValueError):
        return ()
    return tuple(str(i) for i in ids) if isinstance(ids, list) else ()


PASSING = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR)
"""SQLite's result codes for conditions that pass (another process's lock, a full disk,
a failed write): a file that gives one when opened is opened on first use instead."""


UPGRADE_IN_OPEN_ROWS = 20_000
"""Most exchanges a file of an older schema version may hold for ``open`` to upgrade
it before it returns. ``open`` runs in a job process's prewarm, and LiveKit kills a
process whose prewarm takes over 10 s (livekit-agents' ``initialize_process_timeout``
default), which would roll the upgrade back in every new process, forever. A bigger
file is upgraded on a thread of its own: ``open`` returns at once, reads and writes
raise ``StoreUnavailableError`` until it is done (calls go on without memory; their
exchanges wait in ``ExchangeWriter``), and a process killed meanwhile leaves
the file as it was (one transaction) for the next one to upgrade."""
UPGRADE_SECONDS_PER_ROW = 0.0001
"""What upgrading from schema 3 (the turn index of versions 4 and 6) takes per exchange
on a 2-core machine, for the log line's estimate: 8.2 to 17.0 s for 100,000 in the
runs of benchmarks/README.md (``upgrade.py``), depending on the machine's load."""
UPGRADE_RETRY_AFTER = 0.5
"""Seconds between tries of a background upgrade while another process holds the
file's write lock (upgrading it itself, or writing)."""
UPGRADE_WAIT_LOG_EVERY = 60.0
"""Seconds between the warnings a background upgrade logs while it waits (another
process's write lock, a full disk): the first try that fails says why at once."""


def _rows_to_upgrade(path: Path) -> int:
    """How many exchanges a file of an older schema version holds (its largest rowid:
    no scan); 0 for a file of this version, one that is not there or is not ours (the
    usual open says what is wrong with it)."""
    if not path.is_file():
        return 0
    try:
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT)
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if not 0 < version < SCHEMA_VERSION:
                return 0
            return int(
                conn.execute("SELECT max(rowid) FROM exchanges").fetchone()[0] or 0
            )
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


def _rollback(conn: sqlite3.Connection) -> None:
    # SQLite has already rolled back after some errors (a full disk: SQLITE_FULL,
    # SQLITE_IOERR); a ROLLBACK then raises "no transaction is active", which would
    # hide the error callers tell apart by its code (_passing).
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def _passing(exc: BaseException) -> bool:
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


_FTS_TOKENIZER = "porter unicode61 remove_diacritics 2 categories 'L* N* Co M*'"
"""FTS5's porter stemmer over its unicode61 tokenizer, with combining marks (M*)
kept inside words as search_words keeps them (Thai vowel signs are marks)."""
_WORDS = ("user_words", "reply_words")


def _index_words_per_caller(conn: sqlite3.Connection) -> None:
    # Schema 2: the index holds each exchange's search words behind the caller's
    # prefix (columns user_words, reply_words, filled in Python by _save), instead of
    # the raw text and a caller_key column. Runs inside _migrate's transaction.
    for column in _WORDS:
        conn.execute(
            f"ALTER TABLE exchanges ADD COLUMN {column} TEXT NOT NULL DEFAULT ''"
        )
    for trigger in ("exchanges_ai", "exchanges_ad", "exchanges_au"):
        conn.execute(f"DROP TRIGGER {trigger}")
    conn.execute("DROP TABLE exchanges_fts")
    rows = conn.execute(
        "SELECT rowid, caller_id, user_text, assistant_text FROM exchanges"
    )
    conn.executemany(
        "UPDATE exchanges SET user_words = ?, reply_words = ? WHERE rowid = ?",
        (
            (indexed_words(r[1], r[2]), indexed_words(r[1], r[3]), r[0])
            for r in rows.fetchall()
        ),
    )
    columns = ", ".join(_WORDS)
    old = ", ".join(f"old.{c}" for c in _WORDS)
    new = ", ".join(f"new.{c}" for c in _WORDS)
    conn.execute(
        f"""CREATE VIRTUAL TABLE exchanges_fts USING fts5 ({columns},
            content='exchanges', content_rowid='rowid', tokenize="{_FTS_TOKENIZER}")"""
    )
    conn.execute("INSERT INTO exchanges_fts (exchanges_fts) VALUES ('rebuild')")
    delete = f"""INSERT INTO exchanges_fts (exchanges_fts, rowid, {columns})
                 VALUES ('delete', old.rowid, {old});"""
    insert = f"INSERT INTO exchanges_fts (rowid, {columns}) VALUES (new.rowid, {new});"
    conn.execute(
        f"CREATE TRIGGER exchanges_ai AFTER INSERT ON exchanges BEGIN {insert} END"
    )
    conn.execute(
        f"CREATE TRIGGER exchanges_ad AFTER DELETE ON exchanges BEGIN {delete} END"
    )
    conn.execute(
        f"CREATE TRIGGER exchanges_au AFTER UPDATE ON exchanges BEGIN {delete} {insert} END"
    )


_TURN_ROWS_4 = """
    INSERT INTO turns_fts (rowid, words, context, day)
    SELECT {e}.rowid * 2, {e}.user_words,
           coalesce((SELECT CASE WHEN p.call_id = {e}.call_id THEN p.reply_words END
                     FROM exchanges p WHERE p.caller_id = {e}.caller_id
                     AND p.created_at < {e}.created_at
                     ORDER BY p.created_at DESC LIMIT 1), '') || ' ' || {e}.reply_words,
           {e}.day_words {source};
    INSERT INTO turns_fts (rowid, words, context, day)
    SELECT {e}.rowid * 2 + 1, {e}.reply_words, {e}.user_words, {e}.day_words
    {source} {where} {e}.reply_words != '';"""
_DROP_TURN_ROWS = (
    "DELETE FROM turns_fts WHERE rowid IN (old.rowid * 2, old.rowid * 2 + 1);"
)


def _index_turns(conn: sqlite3.Connection, *, fill: bool = True) -> None:
    # Schema 4: recall ranks single turns (each side of an exchange; rowid = the
    # exchange's rowid * 2, + 1 for the reply), each indexed with the turns next to
    # it at a lower weight (the caller's turn: the agent's turn before it in the call
    # and the reply to it; the reply: the caller's turn it answers), so the answer to
    # a question is found by the question's words, and with its day's words
    # (date_words, in the deployment's zone when indexed). All columns hold
    # caller-prefixed words (indexed_words). Kept in step by triggers on exchanges,
    # so every way a row is written or deleted keeps the index right.
    conn.execute("ALTER TABLE exchanges ADD COLUMN day_words TEXT NOT NULL DEFAULT ''")
    rows = conn.execute("SELECT rowid, caller_id, created_at FROM exchanges").fetchall()
    conn.executemany(
        "UPDATE exchanges SET day_words = ? WHERE rowid = ?",
        ((indexed_words(r[1], date_words(r[2])), r[0]) for r in rows),
    )
    conn.execute(
        f"""CREATE VIRTUAL TABLE turns_fts USING fts5 (words, context, day,
            tokenize="{_FTS_TOKENIZER}")"""
    )
    if fill:  # (see apply_migrations)
        for statement in _split_sql(
            _TURN_ROWS_4.format(e="x", source="FROM exchanges x", where="WHERE")
        ):
            conn.execute(statement)
    insert = _TURN_ROWS_4.format(e="new", source="", where="WHERE")
    conn.execute(
        f"CREATE TRIGGER turns_ai AFTER INSERT ON exchanges BEGIN {insert} END"
    )
    conn.execute(
        f"CREATE TRIGGER turns_ad AFTER DELETE ON exchanges BEGIN {_DROP_TURN_ROWS} END"
    )
    conn.execute(
        f"CREATE TRIGGER turns_au AFTER UPDATE ON exchanges BEGIN {_DROP_TURN_ROWS} {insert} END"
    )


_PREVIOUS_EXCHANGE = """coalesce((SELECT CASE WHEN p.call_id = {e}.call_id
    THEN p.user_words || ' ' || p.reply_words END FROM exchanges p
    WHERE p.caller_id = {e}.caller_id AND p.created_at < {e}.created_at
    ORDER BY p.created_at DESC LIMIT 1), '')"""
_TURN_ROWS = f"""
    INSERT INTO turns_fts (rowid, words, context, day)
    SELECT {{e}}.rowid * 2, {{e}}.user_words,
           {_PREVIOUS_EXCHANGE} || ' ' || {{e}}.reply_words, {{e}}.day_words {{source}};
    INSERT INTO turns_fts (rowid, words, context, day)
    SELECT {{e}}.rowid * 2 + 1, {{e}}.reply_words,
           {_PREVIOUS_EXCHANGE} || ' ' || {{e}}.user_words, {{e}}.day_words
    {{source}} {{where}} {{e}}.reply_words != '';"""


def _context_from_previous_exchange(conn: sqlite3.Connection) -> None:
    # Schema 6: a turn's context (turns_fts.context, weight CONTEXT_WEIGHT) is the
    # other side of its own exchange and both sides of the exchange before it in the
    # same call (schema 4 had, for the caller's turn, only that exchange's reply, and
    # for a reply nothing before its own exchange): an answer often continues what was
    # said a turn or two earlier ("How did it go?" after the caller named the event).
    # The rows are written again with it, and the triggers replaced.
    for trigger in ("turns_ai", "turns_au"):
        conn.execute(f"DROP TRIGGER {trigger}")
    conn.execute("DELETE FROM turns_fts")
    for statement in _split_sql(
        _TURN_ROWS.format(e="x", source="FROM exchanges x", where="WHERE")
    ):
        conn.execute(statement)
    insert = _TURN_ROWS.format(e="new", source="", where="WHERE")
    conn.execute(
        f"CREATE TRIGGER turns_ai AFTER INSERT ON exchanges BEGIN {insert} END"
    )
    conn.execute(
        f"CREATE TRIGGER turns_au AFTER UPDATE ON exchanges BEGIN {_DROP_TURN_ROWS} {insert} END"
    )


def apply_migrations(conn: sqlite3.Connection, start: int, end: int) -> None:
    """Move the file ``conn`` has open from schema version ``start`` to ``end`` (steps
    ``MIGRATIONS[start:end]``, each followed by its ``user_version``). The caller
    holds the transaction (``_migrate``); tests and benchmarks/upgrade.py use it to
    make a file of an older version.

    Steps are never edited, but one is run with less work: when step 6 is in the
    same upgrade (the same transaction), step 4 creates the turn index without
    filling it from the stored exchanges, since step 6 deletes and refills every
    row of it (filling it twice took 37 % of a schema 3 -> 6 upgrade,
    benchmarks/upgrade.py). Nothing can read the file in between."""
    for number in range(start, end):
        step = MIGRATIONS[number]
        if number == 3 and end >= 6:
            _index_turns(conn, fill=False)
        elif callable(step):
            step(conn)
        else:
            for statement in _split_sql(step):
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {number + 1}")


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {
        r[0]
        for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    }


def _split_sql(script: str) -> Iterable[str]:
    # sqlite3.executescript() would COMMIT our open transaction; run statements one
    # by one instead. complete_statement() knows that a trigger body's ';' is inside.
    buffer = ""
    for line in script.splitlines(keepends=True):
        if line.strip().startswith("--"):
            continue
        buffer += line
        if sqlite3.complete_statement(buffer):
            yield buffer.strip()
            buffer = ""
    if buffer.strip():
        yield buffer.strip()
