"""The outbox file (outbox.py) run off the event loop: its writes on one thread of
their own (SQLite has one writer at a time anyway), its reads on others, so a recall
never waits behind a delivery's write; and the group commit: the puts of many calls
waiting meanwhile go in one transaction, one fsync (``OutboxThreads.put``).

Used by the hosted stores (hosted.py), the spool of the SQLite and PostgreSQL stores
(spool.py) and their delivery (hosted_delivery.py). Units: seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .errors import FAIL_OPEN, StoreUnavailableError
from .outbox import Outbox
from .outbox_items import Item, Row

Batched = tuple[Item, "tuple[str, float] | None", "asyncio.Future[Row | None]"]
"""A put waiting for its batch's commit: the item, its lease, its outcome."""


def _settle(
    done: asyncio.Future[Row | None], row: Row | None, error: BaseException | None
) -> None:
    if done.cancelled():
        return
    if error is None:
        done.set_result(row)
    else:
        done.set_exception(error)


class OutboxThreads:
    """The outbox file at ``path`` run off the event loop: its writes on one thread
    (SQLite has one writer at a time anyway), its reads on threads of their own, so
    a recall never waits behind a delivery's write. Raises ``StoreUnavailableError``
    for a file that cannot be used, and for work asked of it once ``closed``."""

    def __init__(self, path: Path, keeps_record: bool = True) -> None:
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="memory-outbox")
        self._readers = ThreadPoolExecutor(2, thread_name_prefix="memory-outbox-read")
        self._batch: list[Batched] = []  # to commit next
        self._batch_lock = threading.Lock()
        try:
            self.outbox: Outbox = self._executor.submit(
                Outbox, path, keeps_record
            ).result()
        except (sqlite3.Error, OSError) as exc:
            self._executor.shutdown()
            self._readers.shutdown()
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
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, fn, *args
        )

    async def put(
        self, items: list[Item], lease: tuple[str, float] | None = None
    ) -> list[Row]:
        """``Outbox.put_all`` of ``items`` with the other puts waiting meanwhile, in
        one transaction (one fsync for the batch: a group commit, so many calls
        saving at once stay fast). Returns when they are on disk: the rows ``lease``
        (process, until) leased (``Outbox.put_all``). Raises what the batch's
        ``put_all`` raised (all or none of a batch is written)."""
        if self.closed:
            raise StoreUnavailableError("the memory store is closed")
        loop = asyncio.get_running_loop()
        waits: list[asyncio.Future[Row | None]] = [loop.create_future() for _ in items]
        with self._batch_lock:
            first = not self._batch
            self._batch.extend(zip(items, [lease] * len(items), waits, strict=True))
        if first:  # the batch's commit queues behind the one running, if any
            self._executor.submit(self._commit_batch)
        return [row for row in await asyncio.gather(*waits) if row is not None]

    def _commit_batch(self) -> None:
        with self._batch_lock:
            batch, self._batch = self._batch, []
        error: BaseException | None = None
        held: dict[tuple[str, str], Row] = {}
        # the newest version of an item in the batch is the one kept
        items = {(i.caller_id, i.id): i for i, _, _ in batch}
        leases = {(i.caller_id, i.id): lease for i, lease, _ in batch if lease}
        try:
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
        """Refuse more work, wait for the threads' work, and close the file."""
        self.closed = True
        loop = asyncio.get_running_loop()
        for executor in (self._readers, self._executor):
            await loop.run_in_executor(None, executor.shutdown, True)
        self.outbox.close()
