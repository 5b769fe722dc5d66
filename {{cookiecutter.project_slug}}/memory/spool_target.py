"""Where a local store's spool (spool.py) delivers: the store itself. The write-through
of a save (the store written at once, then the spool's record of it) and the
delivery loop's batches (``hosted_delivery.Delivery``) both go through
``StoreTarget``; a forget that ran while they were written is forgotten again.

Units: seconds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from .errors import FAIL_OPEN
from .hosted_delivery import BACKOFF
from .outbox_items import Item, Row, Tombstones
from .outbox_ledger import Ledger
from .outbox_threads import OutboxThreads
from .store import MemoryStore

logger = logging.getLogger("memory")

BATCH = 256
"""Rows one delivery round takes (one caller's go in one ``save_many``)."""


class StoreTarget:
    """Where a ``SpooledStore``'s delivery writes: the store itself, one caller's
    batch at a time (see ``hosted_delivery.Delivery``)."""

    claim = BATCH
    batched = True
    retries_at_close = True  # a store that is back takes every row at a call's end
    paused_until = 0.0  # no rate limit to wait for (``hosted_delivery.Paced``)

    def __init__(
        self,
        store: MemoryStore,
        io: OutboxThreads,
        ledger: Ledger,
        spool_failed: Callable[[BaseException], None],
        kick: Callable[[], None],
    ) -> None:
        self.store = store
        self.name = type(store).__name__
        self.refusing = False  # the last write failed: no write-through until one works
        self._io = io
        self._ledger = ledger
        self._spool_failed = spool_failed  # the spool file refused its record
        self._kick = kick  # wakes the delivery loop
        self.through: set[asyncio.Task[None]] = set()  # write-throughs under way

    def start(self, rows: list[Row]) -> asyncio.Future[None]:
        """Start ``write_through`` of ``rows`` as a task of its own; the future
        returned is done once the store has answered (or the task ended)."""
        written: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(
            self.write_through(rows, written), name="memory-spool"
        )
        self.through.add(task)
        task.add_done_callback(self.through.discard)
        task.add_done_callback(lambda _: _answered(written))
        return written

    async def stop(self, timeout: float) -> None:
        """Stop the write-throughs the store has not answered (the spool's close),
        each giving its rows back as it stops; waits for that at most ``timeout``
        seconds (a hung spool disk must not hang a job's shutdown)."""
        running = set(self.through)
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running, timeout=timeout)

    async def write_through(
        self, rows: list[Row], written: asyncio.Future[None]
    ) -> None:
        """Write ``rows``, which this process has leased, to the store now, and
        record the outcome: delivered (then ``forget_again``), failed (the
        delivery loop tries them after ``BACKOFF[0]``), or, cancelled (the spool
        closing), given back at once for the next process. ``written`` is set
        once the store has answered: a save waits for that alone."""
        # The record is asked of the writer thread before the save resumes, so a
        # forget this process asks for next comes after it there, and its
        # tombstones never make this write-through forget again.
        try:
            await self.put_all([r.item for r in rows])
        except asyncio.CancelledError:  # the store closes: the rows go back now
            await self._record(self._io.write, self._ledger.release, rows)
            raise
        except FAIL_OPEN as exc:  # it waits in the spool: the loop tries it later
            written.set_result(None)
            await self._record(
                self._io.write, self._ledger.failed_all, rows, exc, BACKOFF[0]
            )
        else:
            written.set_result(None)
            marks = await self._record(
                self._io.grouped, self._ledger.delivered_all, rows
            )
            if marks:
                await self.forget_again(rows, marks)
        self._kick()  # a newer version may wait behind this one's lease

    async def _record(self, how: Any, fn: Any, *args: Any) -> Any:
        try:
            return await how(fn, *args)
        except FAIL_OPEN as exc:  # the row stays leased; the lease runs out
            if not self._io.closed:
                self._spool_failed(exc)
            return None

    async def put_all(self, items: list[Item]) -> None:
        """Write one caller's ``items`` (exchanges in one ``save_many`` when the
        store has it); ``forget_again`` once their delivery is recorded."""
        try:
            await self._write(items)
        except BaseException:
            self.refusing = True
            raise
        self.refusing = False

    async def _write(self, items: list[Item]) -> None:
        exchanges = [i.exchange() for i in items if i.kind == "exchange"]
        save_many = getattr(self.store, "save_many", None)
        if exchanges and save_many is not None:
            await save_many(exchanges)
        else:
            for exchange in exchanges:
                await self.store.save(exchange)
        for item in items:
            if item.kind == "summary":
                s = item.summary()
                await self.store.save_summary(item.caller_id, s.call_id, s.text)

    async def forget_again(self, rows: list[Row], marks: dict[str, Tombstones]) -> None:
        """Forget again in the store the calls a forget hid while ``rows`` were
        written (``marks``: ``Ledger.delivered_all``'s), as that forget may have
        reached the store before them. Never the whole caller: an exchange said
        before the caller's erasure is skipped by the store itself (its
        ``erasures`` mark) or deleted by that forget, and a whole-caller forget
        here would move the erasure's time on and take what the caller said
        after it (which it did: hundreds of such forgets on PostgreSQL, and the
        words of the next 2 s gone). A call summary from before it is forgotten
        with its call (a call's summary is its last write, so the whole call was
        before it). An item id's tombstone is a retention purge's, which the next
        purge covers. Never raises: a store that refuses it is logged at ERROR."""
        for caller_id, forgotten in marks.items():
            calls = sorted(
                {
                    r.item.call_id
                    for r in rows
                    if r.item.caller_id == caller_id
                    and r.item.id not in forgotten.items
                    and (
                        (r.item.kind == "summary" and r.item.at <= forgotten.before)
                        or (
                            r.item.call_id in forgotten.calls
                            and r.item.at > forgotten.before
                        )
                    )
                }
            )
            try:
                for call_id in calls:
                    await self.store.forget(caller_id, call_id=call_id)
            except FAIL_OPEN as exc:
                self.refusing = True
                logger.error(
                    "memory: a forget of caller %s ran while exchanges of %d of "
                    "their calls were being saved, and forgetting those calls again "
                    "failed (%r): forget them again",
                    caller_id,
                    len(calls),
                    exc,
                )

    async def put(self, item: Item, attempts: int) -> dict[str, Any]:
        await self.put_all([item])
        return {}

    async def delete(self, caller_id: str, items: list[Any]) -> None:
        return None  # never queued: a local store forgets itself (``SpooledStore``)

    async def delete_caller(self, caller_id: str) -> None:
        return None


def _answered(written: asyncio.Future[None]) -> None:
    # a write-through that ended without the store's answer (cancelled, failed)
    if not written.done():
        written.set_result(None)
