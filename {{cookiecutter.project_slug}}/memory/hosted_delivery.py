"""Delivery of a spool's writes (outbox.py) to where they are kept: a hosted
service (hosted.py) or a local store (spool.py). A background loop in the job's event
loop takes what is due from the spool file (``outbox_ledger``), deletes first, puts
each item to the target, and records the outcome: delivered, tried again after a
backoff (a 429's wait, a 5xx, a timeout, a store that is down) or, for a request the
service refused, kept and marked. A target with ``put_all`` (a local store) gets one
caller's items in one call (one round trip, one transaction), and the outcome is
recorded for the batch in one transaction. The log says once that the spool backs
up, and once that it drained.

Units: seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from .errors import (
    FAIL_OPEN,
    RateLimitedError,
    ServiceRejectedError,
    StoreUnavailableError,
)
from .outbox import MAX_PENDING
from .outbox_items import Row, Tombstones
from .outbox_ledger import Ledger
from .outbox_threads import OutboxThreads

if TYPE_CHECKING:
    from .outbox_items import Item

logger = logging.getLogger("memory.hosted")

DELIVERY_TIMEOUT = 10.0
"""Seconds one background delivery may take (the caller never waits for it)."""
CLOSE_TIMEOUT = 2.0
"""Seconds ``close`` spends delivering what is left; the rest waits in the outbox."""
BACKOFF = (0.5, 2.0, 5.0, 15.0, 60.0)
"""Seconds before the 1st, 2nd, ... retry of a failed delivery (then every 60 s)."""
BACKLOG_WARNING = 100
"""Undelivered rows (or as many seconds for the oldest) past which the log says, once,
that the outbox is backing up."""


class Paced(Protocol):
    """What delivery asks of the target's connection: until when (time.monotonic())
    it must not be asked anything (a rate limit's wait; 0 for a local store)."""

    paused_until: float


class Target(Protocol):
    """Where delivery writes: a hosted ``Service`` (hosted.py) or a local store's
    ``StoreTarget`` (spool_target.py)."""

    name: str
    claim: int  # rows one round takes
    batched: bool  # True: ``put_all`` takes one caller's due rows at once
    retries_at_close: bool  # True: ``flush`` tries rows waiting out a backoff too

    async def put(self, item: Item, attempts: int) -> dict[str, Any]: ...

    async def put_all(self, items: list[Item]) -> None: ...

    async def delete(
        self, caller_id: str, items: list[tuple[str, dict[str, Any]]]
    ) -> None: ...

    async def delete_caller(self, caller_id: str) -> None: ...


class Delivery:
    """The delivery of one HostedStore: ``kick`` starts or wakes the loop, ``flush``
    delivers what waits within a bound, ``stop`` ends the loop (the store's
    ``close``). Failures never reach the caller: they are recorded in the outbox
    and logged once."""

    def __init__(
        self,
        service: Target,
        http: Paced,
        io: OutboxThreads,
        ledger: Ledger,
        *,
        forget_again: Callable[[list[Row], dict[str, Tombstones]], Awaitable[None]]
        | None = None,
    ) -> None:
        # forget_again: what a batched target does, once a batch's delivery is
        # recorded, with the callers' tombstones read in that record's transaction
        # (``Ledger.delivered_all``; spool.py)
        self._forget_again = forget_again
        self._service = service
        self._http = http
        self._io = io
        self._ledger = ledger
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._round: asyncio.Lock | None = None
        self._round_loop: asyncio.AbstractEventLoop | None = None
        self._warned: set[str] = set()
        self._last_error: BaseException | None = None
        self._released: asyncio.Future[Any] | None = None  # held while it runs

    def kick(self) -> None:
        """Start the delivery loop in the running event loop (the job's), or wake it."""
        if self._io.closed:
            return
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._deliver_forever(), name="memory-outbox")
        assert self._wake is not None
        self._wake.set()

    async def _deliver_forever(self) -> None:
        while not self._io.closed:
            try:
                if await self.deliver_once():
                    continue
                count, oldest, due = await self._io.read(self._ledger.backlog)
            except StoreUnavailableError:
                return  # closed
            except FAIL_OPEN as exc:  # the outbox file itself: try again shortly
                self.warn_once("outbox", "memory outbox error: %r", exc)
                count, oldest, due = 0, None, 5.0
            self._report_backlog(count, oldest)
            wait = min(60.0, due if due is not None else 60.0)
            wait = max(wait, self._http.paused_until - time.monotonic(), 0.01)
            assert self._wake is not None
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)

    async def deliver_once(self) -> bool:
        """Deliver what is due now (deletes first); returns False when nothing was.
        One round at a time per process, so ``flush`` waits for the background
        loop's round instead of finding its rows leased."""
        loop = asyncio.get_running_loop()
        if self._round is None or self._round_loop is not loop:  # a lock is one loop's
            self._round, self._round_loop = asyncio.Lock(), loop
        async with self._round:
            claimed = asyncio.ensure_future(
                self._io.write(self._ledger.claim, self._service.claim)
            )
            try:
                # shielded: the claim leases on the writer thread even if this round
                # is cut short meanwhile, and then what it leased must be given back
                deletes, rows = await asyncio.shield(claimed)
                for d in deletes:
                    await self._delete(d)
                if self._service.batched:  # one call per caller's batch
                    batches: dict[str, list[Row]] = {}
                    for r in rows:
                        batches.setdefault(r.item.caller_id, []).append(r)
                    await asyncio.gather(*(self._put_all(b) for b in batches.values()))
                else:
                    await asyncio.gather(*(self._put(r) for r in rows))
            except asyncio.CancelledError:
                # A flush's bound ran out mid-round (its claim included): give the
                # work back now, not after LEASE (the target may have some of it:
                # delivering again is safe), or a 429's row waits out the lease.
                claimed.add_done_callback(self._give_back)
                raise
        return bool(deletes or rows)

    def _give_back(self, claimed: asyncio.Future[Any]) -> None:
        if claimed.cancelled() or claimed.exception() is not None:
            return  # nothing was leased
        deletes, rows = claimed.result()
        release = self._io.write(
            self._ledger.release, rows, [d["seq"] for d in deletes]
        )
        self._released = asyncio.ensure_future(release)
        self._released.add_done_callback(_quiet)

    async def _put_all(self, rows: list[Row]) -> None:
        try:
            await asyncio.wait_for(
                self._service.put_all([r.item for r in rows]), DELIVERY_TIMEOUT
            )
        except FAIL_OPEN as exc:
            retry = self._retry_in(exc, max(r.attempts for r in rows))
            await self._io.write(self._ledger.failed_all, rows, exc, retry)
        else:
            marks = await self._io.grouped(self._ledger.delivered_all, rows)
            if marks and self._forget_again is not None:
                await self._forget_again(rows, marks)

    async def _put(self, row: Row) -> None:
        try:
            remote = await asyncio.wait_for(
                self._service.put(row.item, row.attempts), DELIVERY_TIMEOUT
            )
        except FAIL_OPEN as exc:
            retry = self._retry_in(exc, row.attempts)
            if retry is None:
                # The service's answer may quote what it was sent (the caller's words):
                # only its status above DEBUG.
                why = type(exc).__name__
                if isinstance(exc, ServiceRejectedError):
                    why = f"status {exc.status}"
                logger.error(
                    "memory: %s rejected %s %s of caller %s (%s); it stays in %s",
                    self._service.name,
                    row.item.kind,
                    row.item.id,
                    row.item.caller_id,
                    why,
                    self._io.outbox.path,
                )
                logger.debug("memory: %s's answer: %s", self._service.name, exc)
            await self._io.write(
                self._ledger.failed,
                "items",
                (row.item.caller_id, row.item.id),
                exc,
                retry,
            )
        else:
            await self._io.write(self._ledger.delivered, row, remote)

    async def _delete(self, d: dict[str, Any]) -> None:
        try:
            if d["everything"]:
                await asyncio.wait_for(
                    self._service.delete_caller(d["caller_id"]), DELIVERY_TIMEOUT
                )
                # and the time of it, for workers that do not share this file
                mark = getattr(self._service, "mark_erased", None)
                if mark is not None:
                    marks = await self._io.read(
                        self._io.outbox.tombstones, d["caller_id"]
                    )
                    await asyncio.wait_for(
                        mark(d["caller_id"], marks.before), DELIVERY_TIMEOUT
                    )
            else:
                items = [(i, r) for i, r in d["items"]]
                await asyncio.wait_for(
                    self._service.delete(d["caller_id"], items), DELIVERY_TIMEOUT
                )
        except FAIL_OPEN as exc:
            # a refused delete is retried hourly: forgetting must not be dropped
            retry = self._retry_in(exc, d["attempts"]) or 3600.0
            await self._io.write(
                self._ledger.failed, "deletes", (d["seq"],), exc, retry
            )
        else:
            await self._io.write(self._ledger.deleted, d["seq"])

    def _retry_in(self, exc: BaseException, attempts: int) -> float | None:
        self._last_error = exc
        if isinstance(exc, ServiceRejectedError):
            return None
        if isinstance(exc, RateLimitedError):
            return exc.retry_after
        if not isinstance(exc, (StoreUnavailableError, TimeoutError)):
            self.warn_once("deliver", "memory delivery failed unexpectedly: %r", exc)
        return BACKOFF[min(attempts, len(BACKOFF) - 1)]

    def _report_backlog(self, count: int, oldest: float | None) -> None:
        # Once when the outbox backs up, once when it has drained: never every turn.
        backed_up = count >= BACKLOG_WARNING or (oldest or 0) >= BACKLOG_WARNING
        if backed_up and "backlog" not in self._warned:
            self._warned.add("backlog")
            logger.warning(
                "memory outbox is backing up: %d write(s) not yet delivered to %s, the oldest "
                "waiting %.0f s (last error: %r); they are safe in %s and will be delivered "
                "when %s answers (at most %d are kept)",
                count,
                self._service.name,
                oldest or 0,
                self._last_error,
                self._io.outbox.path,
                self._service.name,
                MAX_PENDING,
            )
        elif count == 0 and "backlog" in self._warned:
            self._warned.discard("backlog")
            logger.info(
                "memory outbox drained: every write was delivered to %s",
                self._service.name,
            )

    def warn_once(self, kind: str, message: str, *args: Any) -> None:
        """Log a warning of ``kind`` once per store (the store's own too)."""
        if kind not in self._warned:
            self._warned.add(kind)
            logger.warning(message, *args)

    async def flush(self, timeout: float = CLOSE_TIMEOUT) -> int:
        """Deliver what is waiting, for at most ``timeout`` seconds; returns how many
        writes are still undelivered (they stay in the outbox)."""
        await self._io.write(self._ledger.due_now, self._service.retries_at_close)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if await asyncio.wait_for(
                    self.deliver_once(), deadline - time.monotonic()
                ):
                    continue
            except TimeoutError:
                break
            # Nothing due now: wait for what comes due within the bound (a backoff,
            # a lease given back by a round cut short), not for what comes later.
            count, _, due = await self._io.read(self._ledger.backlog)
            if not count or due is None or due >= deadline - time.monotonic():
                break
            await asyncio.sleep(max(due, 0.01))
        count, oldest, _ = await self._io.read(self._ledger.backlog)
        self._report_backlog(count, oldest)
        return count

    async def stop(self) -> None:
        """End the loop, if it runs in this event loop, and return once what its
        round in flight had leased is given back (the store's ``close``, before
        the outbox closes: else those rows wait out ``LEASE`` for the next
        process)."""
        task = self._task
        if task is None or task.get_loop() is not asyncio.get_running_loop():
            return
        task.cancel()
        await asyncio.wait({task}, timeout=CLOSE_TIMEOUT)
        if self._released is not None and not self._released.done():
            await asyncio.wait({self._released}, timeout=CLOSE_TIMEOUT)


def _quiet(done: asyncio.Future[Any]) -> None:
    # a release that failed (the file closed meanwhile): the lease runs out instead
    if not done.cancelled():
        done.exception()
