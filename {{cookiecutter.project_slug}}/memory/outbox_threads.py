"""The outbox file (outbox.py) run off the event loop: its writes on one thread of
their own (SQLite has one writer at a time anyway), its reads on others, so a recall
never waits behind a delivery's write; and the group commit: the puts of many calls
waiting meanwhile go in one transaction (``OutboxThreads.put``), fsync'd with it
(the hosted outbox) or, with a ``sync_window`` (a local store's spool), with every
other commit of that window in one fsync on a thread of its own.

Used by the hosted stores (hosted.py), the spool of the SQLite and PostgreSQL stores
(spool.py) and their delivery (hosted_delivery.py). Units: seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from . import outbox_file
from .errors import FAIL_OPEN, StoreUnavailableError
from .outbox import Outbox
from .outbox_items import Item, Row

logger = logging.getLogger("memory")

Batched = tuple[Item, "tuple[str, float] | None", "asyncio.Future[Row | None]"]
"""A put waiting for its batch's commit: the item, its lease, its outcome."""


def _settle(
    done: asyncio.Future[Any], result: Any, error: BaseException | None
) -> None:
    if done.cancelled():
        return
    if error is None:
        done.set_result(result)
    else:
        done.set_exception(error)


class OutboxThreads:
    """The outbox file at ``path`` run off the event loop: its writes on one thread
    (SQLite has one writer at a time anyway), its reads on threads of their own, so
    a recall never waits behind a delivery's write. Raises ``StoreUnavailableError``
    for a file that cannot be used, and for work asked of it once ``closed``.

    ``sync_window`` 0: every commit is fsync'd before it returns. Above 0 (seconds):
    a commit is in the operating system's hands when it returns (a killed process
    loses nothing), and fsync'd within ``sync_window`` and before ``sync`` or
    ``close`` returns, one fsync for every commit meanwhile (``sync_wal``)."""

    def __init__(
        self, path: Path, keeps_record: bool = True, sync_window: float = 0.0
    ) -> None:
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="memory-outbox")
        self._readers = ThreadPoolExecutor(2, thread_name_prefix="memory-outbox-read")
        self._syncer = ThreadPoolExecutor(1, thread_name_prefix="memory-outbox-sync")
        self._batch: list[Batched] = []  # to commit next
        # grouped writes waiting, by function: (rows, outcome) each
        self._groups: dict[Any, list[tuple[list[Row], asyncio.Future[Any]]]] = {}
        self._batch_lock = threading.Lock()
        self.sync_window = sync_window
        self._sync_at: tuple[asyncio.AbstractEventLoop, asyncio.TimerHandle] | None = (
            None
        )
        try:
            self.outbox: Outbox = self._executor.submit(
                Outbox, path, keeps_record, sync_window <= 0
            ).result()
        except (sqlite3.Error, OSError) as exc:
            for executor in (self._executor, self._readers, self._syncer):
                executor.shutdown()
            raise StoreUnavailableError(
                f"cannot use {path} as the memory outbox: {exc}"
            ) from exc
        self.closed = False

    async def read(self, fn: Any, *args: Any) -> Any:
        """Run an outbox read on a reader thread (never behind a write)."""
        if self.closed:
            raise StoreUnavailableError("the memory store is closed")
        return await asyncio.get_running_loop().run_in_executor(
            self._readers, fn, *args
        )

    async def write(self, fn: Any, *args: Any) -> Any:
        """Run an outbox write on the writer thread."""
        if self.closed:
            raise StoreUnavailableError("the memory store is closed")
        done = await asyncio.get_running_loop().run_in_executor(
            self._executor, fn, *args
        )
        self._sync_later()
        return done

    async def grouped(self, fn: Any, rows: list[Row]) -> Any:
        """``fn(rows)`` on the writer thread, together with every other ``grouped``
        call of ``fn`` waiting meanwhile: one call with all their rows (one
        transaction; many calls' delivery records stay cheap). Returns what that
        call returned; raises what it raised."""
        if self.closed:
            raise StoreUnavailableError("the memory store is closed")
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        with self._batch_lock:
            waiting = self._groups.setdefault(fn, [])
            first = not waiting
            waiting.append((rows, done))
        if first:
            self._executor.submit(self._run_group, fn)
        result = await done
        self._sync_later()
        return result

    def _run_group(self, fn: Any) -> None:
        with self._batch_lock:
            group = self._groups.pop(fn, [])
        result: Any = None
        error: BaseException | None = None
        try:
            result = fn([row for rows, _ in group for row in rows])
        except FAIL_OPEN as exc:  # handed to every call waiting for this group
            error = exc
        for _, done in group:
            with contextlib.suppress(RuntimeError):
                done.get_loop().call_soon_threadsafe(_settle, done, result, error)

    async def put(
        self, items: list[Item], lease: tuple[str, float] | None = None
    ) -> list[Row]:
        """``Outbox.put_all`` of ``items`` with the other puts waiting meanwhile, in
        one transaction (a group commit, so many calls saving at once stay fast).
        Returns when they are committed (on the disk then, or within
        ``sync_window``): the rows ``lease`` (process, until) leased
        (``Outbox.put_all``). Raises what the batch's ``put_all`` raised (all or
        none of a batch is written)."""
        if self.closed:
            raise StoreUnavailableError("the memory store is closed")
        loop = asyncio.get_running_loop()
        waits: list[asyncio.Future[Row | None]] = [loop.create_future() for _ in items]
        with self._batch_lock:
            first = not self._batch
            self._batch.extend(zip(items, [lease] * len(items), waits, strict=True))
        if first:  # the batch's commit queues behind the one running, if any
            self._executor.submit(self._commit_batch)
        rows = [row for row in await asyncio.gather(*waits) if row is not None]
        self._sync_later()
        return rows

    def _sync_later(self) -> None:
        # A commit not fsync'd yet: it is, within the window, with every other
        # commit meanwhile (one timer at a time, on the loop that committed).
        if self.outbox.synced:
            return
        loop = asyncio.get_running_loop()
        if self._sync_at is not None and self._sync_at[0] is loop:
            return
        self._sync_at = (loop, loop.call_later(self.sync_window, self._sync_due))

    def _sync_due(self) -> None:
        self._sync_at = None
        if not self.closed:
            asyncio.ensure_future(self.sync()).add_done_callback(_logged)

    async def sync(self) -> None:
        """Return once every commit made so far is on the disk (``sync_wal``;
        nothing to do when each commit is). Raises OSError when the fsync fails."""
        loop = asyncio.get_running_loop()
        if not self.closed:  # what waits for the fsync is in the file the path names
            await loop.run_in_executor(self._executor, self._check_file)
        if not self.outbox.synced:
            await loop.run_in_executor(self._syncer, sync_wal, self.outbox.path)

    def _check_file(self) -> None:
        # on the writer thread: the file deleted or replaced while in use
        kept = outbox_file.renew(self.outbox)
        if kept is None:
            return
        logger.error(
            "memory: %s was deleted or replaced while in use; the file now "
            "there holds %s",
            self.outbox.path,
            f"the {kept} undelivered write(s) it had"
            if kept >= 0
            else "what comes next (what the old one held could not be read: lost)",
        )

    def _commit_batch(self) -> None:
        with self._batch_lock:
            batch, self._batch = self._batch, []
        error: BaseException | None = None
        held: dict[tuple[str, str], Row] = {}
        # the newest version of an item in the batch is the one kept
        items = {(i.caller_id, i.id): i for i, _, _ in batch}
        leases = {(i.caller_id, i.id): lease for i, lease, _ in batch if lease}
        try:
            self._check_file()
            for leased in self.outbox.put_all(list(items.values()), None, leases):
                held[leased.item.caller_id, leased.item.id] = leased
        except FAIL_OPEN as exc:  # handed to every put waiting for this batch
            error = exc
        for item, _, done in batch:  # each on its own event loop (closed: none waits)
            key = (item.caller_id, item.id)
            row = held.pop(key) if key in held else None  # to one put only
            with contextlib.suppress(RuntimeError):
                done.get_loop().call_soon_threadsafe(_settle, done, row, error)

    async def close(self) -> None:
        """Refuse more work, wait for the threads' work, fsync what they wrote, and
        close the file."""
        self.closed = True
        if self._sync_at is not None:
            self._sync_at[1].cancel()
        loop = asyncio.get_running_loop()
        for executor in (self._readers, self._executor):
            await loop.run_in_executor(None, executor.shutdown, True)
        try:
            await self.sync()
        finally:
            await loop.run_in_executor(None, self._syncer.shutdown, True)
            self.outbox.close()


def sync_wal(path: Path) -> None:
    """fsync the commits of the SQLite file at ``path`` made ``synchronous=NORMAL``:
    its WAL file, where every commit is until a checkpoint (which syncs the file)."""
    try:
        fd = os.open(f"{path}-wal", os.O_RDONLY)
    except FileNotFoundError:
        return  # checkpointed into the file and removed: on the disk
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _logged(synced: asyncio.Future[None]) -> None:
    # a timed fsync that failed: what it covers may not survive a power loss
    if not synced.cancelled() and synced.exception() is not None:
        logger.error("memory: the spool's fsync failed: %r", synced.exception())
