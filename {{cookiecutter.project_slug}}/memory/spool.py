"""The spool: what a call hands to memory is on the worker's disk before the call
can lose it, and reaches the store once the store takes it, from this process or
any later one.

Design. Every backend has one spool, and it is one mechanism: the SQLite outbox of
the hosted backends (outbox.py, delivered by hosted_delivery.py), generalised.

- Hosted services (hosted.py): the outbox is the spool, and also the record
  (delivered rows are kept, ``outbox.KEEP_DELIVERED``), as before.
- SQLite and PostgreSQL (this module): ``open_store`` wraps the store in a
  ``SpooledStore``. ``save`` and ``save_summary`` put the item in the spool file and
  return once it is committed: SQLite in WAL mode, on a thread of its own, never on
  the event loop; the puts that wait meanwhile are committed together
  (``OutboxThreads.put``). A commit is in the operating system's hands when it
  returns (a killed worker loses nothing) and fsync'd within ``SYNC_WINDOW``, one
  fsync for every commit of the window, on a thread of its own (``flush`` and
  ``close`` return only once it is; a put fsync'd with each commit cost about
  half the saves per second: benchmarks/README.md, spool.py). The same transaction
  leases the row to this process, which writes it through to the store at once;
  ``save`` waits for that at most ``WRITE_THROUGH_WAIT`` (so a store that answers
  has the exchange when ``save`` returns, and a slow one never holds up the
  call's next save). The record of it (the row deleted, and the caller's
  tombstones read in that transaction: a call forgotten meanwhile is
  forgotten again; the store's erasure mark skips what a caller's erasure hid)
  follows, one transaction for every record waiting (``OutboxThreads.grouped``);
  a new row is leased in the statement that writes it, so a save the store takes
  costs the spool two transactions, each shared with the other calls' (2,416-2,464
  saves/s against 3,340-4,431 without the spool, 8 calls on 2 quiet cores:
  benchmarks/README.md, spool.py).
  While the store refuses, nothing is written through: the
  delivery loop (hosted_delivery.Delivery) tries it with a backoff and, at a
  call's end, everything again, one caller's due rows in one ``save_many`` (one
  round trip, one transaction). A row is deleted from the spool once the store
  has it (the store is the record).
- A process that dies (SIGKILL, out of memory) leaves its rows in the file; the
  next process that opens the same store opens the same spool and delivers them,
  taking over rows leased by the dead one after ``outbox_ledger.LEASE``.
- Exactly once: the store upserts an exchange by its key (``records.exchange_key``)
  and a summary by its call, so a row delivered twice (a process killed between
  the store's commit and the spool's) is written once.
- Where: beside the SQLite memory file (``memory.db-spool``); for PostgreSQL in the
  data folder (``places.data_dir``), one file per server, database, schema and
  tenant (``memory-spool-<12 hex>.db``), so a spool is never delivered to another
  store.
- Erasure: ``forget`` deletes the caller's spooled rows (of the call, or all) in
  one transaction before the store forgets, and leaves a tombstone (ids and times,
  no words, kept ``outbox.KEEP_TOMBSTONES``); a delivery in flight meanwhile, in
  any process, looks at the tombstones after its write and forgets again what it
  brought back. Deleted rows are overwritten (``secure_delete``) and the WAL is
  cut after a forget.
- Retention: delivered rows go at once; ``purge`` purges the spool too, so no
  undelivered row outlives the retention of its kind.
- A spool file deleted or replaced while in use (``rm data/*``, another tool)
  is noticed before the next commit and the next fsync: what it held that
  the open file still reads goes into a new file at its path (``outbox_file``;
  one ERROR).
- Fail open: a spool file that cannot be opened (damaged, unwritable) or refuses
  a put (full: ``outbox.MAX_PENDING`` undelivered rows; the disk full) is logged
  once at ERROR, and saves go to the store directly, as with no spool: memory may
  then be lost, the call never notices.

Facts are not spooled: ``remember`` and ``forget`` tell the model what the store
did, so they go to it directly. ``MEMORY_SPOOL=off`` turns the spool off.

Units: seconds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

from . import outbox_ledger
from .errors import FAIL_OPEN, StoreUnavailableError
from .facts import Fact, Remembered
from .hosted_delivery import CLOSE_TIMEOUT, Delivery
from .limits import RECALL_EXCHANGES, WRITE_TIMEOUT, switched_off
from .outbox_items import Item
from .outbox_ledger import Ledger
from .outbox_threads import OutboxThreads
from .records import Exchange, Recall, Summary
from .spool_target import StoreTarget
from .store import PURGEABLE, MemoryStore

logger = logging.getLogger("memory")

SPOOL_SETTING = "MEMORY_SPOOL"
"""On/off (``limits.switched_off``; default on): the spool of the SQLite and
PostgreSQL stores."""
SYNC_WINDOW = 0.05
"""Seconds within which what was spooled is fsync'd (one fsync for every put of
the window); ``flush`` and ``close`` return only once it is."""
WRITE_THROUGH_WAIT = 0.5
"""Seconds ``save`` waits for the store to take an exchange it has spooled; past
it, ``save`` returns (the exchange is on disk) and the write goes on."""


def spool_path(store: Any) -> Path | None:
    """Where ``store``'s spool is: ``<memory file>-spool`` for SQLite, the store's
    ``spool_path`` for one that names it (PostgreSQL); None for another store."""
    named = getattr(store, "spool_path", None)
    if isinstance(named, Path):
        return named
    path = getattr(store, "path", None)
    if isinstance(path, Path):
        return path.with_name(path.name + "-spool")
    return None


def spooled(store: MemoryStore, *, create: bool = True) -> MemoryStore:
    """``store`` with its spool (``SpooledStore``), or ``store`` itself when the
    spool is off (``MEMORY_SPOOL``), the store names no place for one, or, with
    ``create=False`` (an operator's read commands), no spool file exists. Never
    raises: a spool that cannot be opened is logged at ERROR and left out."""
    path = spool_path(store)
    if path is None or switched_off(SPOOL_SETTING):
        return store
    if not create and not path.is_file():
        return store
    return SpooledStore(store, path)


class SpooledStore:
    """A SQLite or PostgreSQL store with its spool (this module's docstring).

    A ``MemoryStore``: writes as said there, reads from the store (``exchanges``
    and ``summaries`` add what still waits in the spool, so an export has it all);
    other attributes are the store's (``path``, ``generation``, ...). ``flush``
    delivers what waits, within a bound."""

    def __init__(self, store: MemoryStore, path: Path) -> None:
        self.store = store
        self.spool_path = path
        self._io: OutboxThreads | None = None
        self._delivery: Delivery | None = None
        self._refused = False
        # callers being forgotten: their saves asked for meanwhile wait for the forget
        # (else their write-through could reach the store before its forget)
        self._forgetting: dict[str, asyncio.Event] = {}
        try:
            self._io = OutboxThreads(path, keeps_record=False, sync_window=SYNC_WINDOW)
        except FAIL_OPEN as exc:
            self._spool_failed(exc)
            return
        self._ledger = Ledger(self._io.outbox)
        self._target = StoreTarget(
            store, self._io, self._ledger, self._spool_failed, self._kick
        )
        self._delivery = Delivery(
            self._target,
            self._target,
            self._io,
            self._ledger,
            forget_again=self._target.forget_again,
        )

    def __getattr__(self, name: str) -> Any:
        # only for names this class does not have: the store's own
        if name == "store":
            raise AttributeError(name)
        return getattr(self.store, name)

    def _spool_failed(self, exc: BaseException) -> None:
        if not self._refused:
            self._refused = True
            logger.error(
                "memory: the spool %s cannot be used (%r); saves go to the store "
                "directly, and what it refuses until a call ends is lost",
                self.spool_path,
                exc,
            )

    def _kick(self) -> None:
        if self._delivery is not None:
            self._delivery.kick()

    async def _put(self, items: list[Item]) -> bool:
        """``items`` into the spool, then written through to the store (waiting for
        that at most ``WRITE_THROUGH_WAIT``, and not at all while an earlier one is
        still under way) unless it refuses writes now; False (logged once) when the
        spool refused them."""
        if self._io is None:
            return False
        lease = None
        if not self._target.refusing:
            lease = (self._ledger.me, time.time() + outbox_ledger.LEASE)
        try:
            rows = await self._io.put(items, lease)
        except FAIL_OPEN as exc:
            if self._io.closed:
                raise
            self._spool_failed(exc)
            return False
        self._refused = False  # it takes puts again: a later refusal is logged
        if not rows:  # being delivered already, or the store refuses: the loop's
            self._kick()
            return True
        busy = bool(self._target.through)
        answered = self._target.start(rows)
        if not busy:
            await asyncio.wait({answered}, timeout=WRITE_THROUGH_WAIT)
        return True

    # -- writes --

    async def _after_forget(self, caller_id: str) -> None:
        forgetting = self._forgetting.get(caller_id)
        if forgetting is not None:
            await forgetting.wait()

    async def save(self, exchange: Exchange) -> None:
        await self._after_forget(exchange.caller_id)
        if not await self._put([Item.of_exchange(exchange)]):
            await self.store.save(exchange)

    async def save_many(self, exchanges: list[Exchange]) -> None:
        """``save`` for one caller's ``exchanges`` at once: one put (one fsync), one
        write-through (the store's ``save_many``). What ``ExchangeWriter`` hands
        over when several wait."""
        for caller_id in {e.caller_id for e in exchanges}:
            await self._after_forget(caller_id)
        if not await self._put([Item.of_exchange(e) for e in exchanges]):
            save_many = getattr(self.store, "save_many", None)
            if save_many is not None:
                await save_many(exchanges)
            else:
                for exchange in exchanges:
                    await self.store.save(exchange)

    async def save_summary(self, caller_id: str, call_id: str, text: str) -> None:
        summary = Item.of_summary(caller_id, Summary(call_id, text, time.time()))
        if not await self._put([summary]):
            await self.store.save_summary(caller_id, call_id, text)
            return
        # The summary is a call's last write (CallMemory.aclose, in the job's
        # shutdown): deliver what waits now, while the job process surely lives.
        # CallMemory bounds this wait; what it cuts off waits in the spool.
        await self.flush(CLOSE_TIMEOUT)

    async def remember(
        self, caller_id: str, fact: Fact, *, timeout: float = WRITE_TIMEOUT
    ) -> Remembered:
        return await self.store.remember(caller_id, fact, timeout=timeout)

    async def forget(
        self,
        caller_id: str,
        *,
        kind: str | None = None,
        value: str | None = None,
        call_id: str | None = None,
        timeout: float = WRITE_TIMEOUT,
    ) -> int:
        if kind is not None:  # facts are never spooled
            return await self.store.forget(
                caller_id, kind=kind, value=value, timeout=timeout
            )
        await self._after_forget(caller_id)  # one forget of a caller at a time
        done = self._forgetting[caller_id] = asyncio.Event()
        try:
            return await self._forget(caller_id, call_id, timeout)
        finally:
            if self._forgetting.get(caller_id) is done:
                del self._forgetting[caller_id]
            done.set()

    async def _forget(self, caller_id: str, call_id: str | None, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        spooled = 0
        if self._io is not None:
            scope: dict[str, Any] = {} if call_id is None else {"call": call_id}
            # first, so nothing spooled reaches the store after its forget
            spooled = await self._io.write(
                self._io.outbox.forget, caller_id, scope, [], deadline, False
            )
        n = await self.store.forget(
            caller_id, call_id=call_id, timeout=max(0.0, deadline - time.monotonic())
        )
        return n + spooled

    async def purge(self, *, before: float, what: str) -> int:
        if what not in PURGEABLE:
            raise ValueError(
                f"what must be one of {', '.join(PURGEABLE)}, not {what!r}"
            )
        n = 0
        if self._io is not None and what != "facts":
            n = await self._io.write(self._io.outbox.purge, what, before)
        return n + await self.store.purge(before=before, what=what)

    # -- reads --

    async def profile(self, caller_id: str) -> Recall:
        self._kick()
        return await self.store.profile(caller_id)

    async def recall(
        self,
        caller_id: str,
        query: str,
        *,
        limit: int = RECALL_EXCHANGES,
        exclude_call_id: str | None = None,
    ) -> Recall:
        self._kick()
        return await self.store.recall(
            caller_id, query, limit=limit, exclude_call_id=exclude_call_id
        )

    async def _waiting(self, caller_id: str, kind: str) -> list[Item]:
        if self._io is None:
            return []
        rows, _ = await self._io.read(self._io.outbox.rows, caller_id, (kind,))
        return [r.item for r in rows if r.pending and r.item.kind == kind]

    async def exchanges(
        self, caller_id: str, *, call_id: str | None = None
    ) -> list[Exchange]:
        stored = await self.store.exchanges(caller_id, call_id=call_id)
        keys = {e.key for e in stored}
        waiting = [
            i.exchange()
            for i in await self._waiting(caller_id, "exchange")
            if i.id not in keys and call_id in (None, i.call_id)
        ]
        return sorted([*stored, *waiting], key=lambda e: (e.created_at, e.key))

    async def summaries(self, caller_id: str) -> list[Summary]:
        stored = await self.store.summaries(caller_id)
        calls = {s.call_id for s in stored}
        waiting = [
            i.summary()
            for i in await self._waiting(caller_id, "summary")
            if i.call_id not in calls
        ]
        return sorted([*stored, *waiting], key=lambda s: s.created_at, reverse=True)

    async def history(self, caller_id: str) -> list[Fact]:
        return await self.store.history(caller_id)

    async def callers(self, *, after: str = "", limit: int = 100) -> list[str]:
        return await self.store.callers(after=after, limit=limit)

    async def stats(self) -> dict[str, int]:
        return await self.store.stats()

    # -- delivery and the end --

    async def flush(self, timeout: float = CLOSE_TIMEOUT) -> int:
        """Deliver what waits in the spool for at most ``timeout`` seconds; returns
        how many rows are still undelivered (0 without a spool)."""
        if self._delivery is None or self._io is None or self._io.closed:
            return 0
        deadline = time.monotonic() + timeout
        if self._target.through:  # their rows are leased until they end
            await asyncio.wait(set(self._target.through), timeout=timeout)
        try:
            left = await self._delivery.flush(max(0.0, deadline - time.monotonic()))
            await self._io.sync()  # what is left is on the disk when this returns
            return left
        except StoreUnavailableError:
            raise
        except FAIL_OPEN as exc:
            self._spool_failed(exc)
            return 0

    async def close(self) -> None:
        """Deliver what waits (``CLOSE_TIMEOUT``; the rest stays in the spool for the
        next process, and a write-through the store has not answered by then is
        stopped, its rows given back so the next process need not wait out their
        lease), close the spool and the store. Idempotent."""
        if self._io is not None and not self._io.closed:
            try:
                left = await self.flush(CLOSE_TIMEOUT)
                if left:
                    logger.warning(
                        "memory: %d write(s) not yet in the store at close; they "
                        "wait in %s for the next process",
                        left,
                        self.spool_path,
                    )
            finally:
                assert self._delivery is not None
                await self._target.stop(CLOSE_TIMEOUT)
                await self._delivery.stop()
                self._io.closed = True
                await self._io.close()
        await self.store.close()
