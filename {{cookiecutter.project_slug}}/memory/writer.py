"""The background writer: each exchange is saved off the reply's path, retried,
and flushed when the call ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable, Callable

from .errors import FAIL_OPEN
from .limits import RETRY_PARKED_AFTER, SAVE_ATTEMPTS
from .records import Exchange
from .store import MemoryStore

BATCH = 200
"""Exchanges one ``save_many`` takes at most (a backlog after an outage)."""


class ExchangeWriter:
    """Saves exchanges in the background, oldest first, newest version only.

    ``put`` never blocks or raises. Several waiting at once (a backlog) go in one
    ``save_many`` when the store has one (one round trip). An exchange that fails ``SAVE_ATTEMPTS`` times
    (with 0.1 s, 0.2 s pauses) is parked so it never holds up the rest; parked
    exchanges are tried again as soon as another save succeeds (the store is back)
    and on a backoff timer (``RETRY_PARKED_AFTER``), and once more by ``flush``.
    ``drop_all`` forgets what is queued: a save already running finishes, nothing
    queued is written after it.
    """

    def __init__(self, store: MemoryStore, on_error: Callable[[BaseException], None]):
        self.store = store
        self._on_error = on_error
        self._pending: dict[str, Exchange] = {}
        self._parked: dict[str, Exchange] = {}
        self._task: asyncio.Task[None] | None = None
        self._retry: asyncio.TimerHandle | None = None
        self._retries = 0
        self.saved = 0
        self.save: Callable[[Exchange], Awaitable[None]] = store.save
        """What writes one exchange (CallMemory puts its traced save here)."""
        self.save_many: Callable[[list[Exchange]], Awaitable[None]] | None = None
        """What writes several at once (a store's ``save_many``, traced), or None:
        when several wait (a backlog), they go in one call, up to ``BATCH``."""

    @property
    def unsaved(self) -> int:
        """Exchanges accepted but not yet written (parked ones included)."""
        return len(self._pending) + len(self._parked)

    def unsaved_exchanges(self) -> list[Exchange]:
        return [*self._pending.values(), *self._parked.values()]

    def put(self, exchange: Exchange) -> None:
        # Only the newest version of an exchange matters: it replaces a queued one.
        self._parked.pop(exchange.key, None)
        self._pending[exchange.key] = exchange
        self._kick()

    def drop_all(self) -> None:
        self._pending.clear()
        self._parked.clear()
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None

    def retry_parked(self) -> None:
        """Queue the parked exchanges again (what the timer and a good save do)."""
        self._retry = None
        for key, exchange in list(self._parked.items()):
            del self._parked[key]
            self._pending.setdefault(key, exchange)
        if self._pending:
            self._kick()

    def _kick(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="memory-writer")

    async def _run(self) -> None:
        while self._pending:
            size = BATCH if self.save_many is not None else 1
            batch = dict(itertools.islice(self._pending.items(), size))
            saved, error = False, None
            for attempt in range(SAVE_ATTEMPTS):
                # those replaced by a newer version, or forgotten, meanwhile go out
                live = [e for k, e in batch.items() if self._pending.get(k) is e]
                if not live:
                    break
                try:
                    if len(live) > 1 and self.save_many is not None:
                        await self.save_many(live)
                    else:
                        await self.save(live[0])
                    saved = True
                    break
                except FAIL_OPEN as exc:
                    error = exc
                    if attempt < SAVE_ATTEMPTS - 1:
                        await asyncio.sleep(0.1 * 2**attempt)
            done = [k for k, e in batch.items() if self._pending.get(k) is e]
            if not done:
                continue
            for key in done:
                exchange = self._pending.pop(key)
                if saved:
                    self.saved += 1
                else:
                    self._parked[key] = exchange
            if saved:
                self._retries = 0
                if self._parked:  # the store is back: the parked ones go next
                    self.retry_parked()
            else:
                self._on_error(error or RuntimeError("save failed"))
                self._schedule_retry()

    def _schedule_retry(self) -> None:
        if self._retry is not None:
            return
        delay = RETRY_PARKED_AFTER[min(self._retries, len(RETRY_PARKED_AFTER) - 1)]
        self._retries += 1
        self._retry = asyncio.get_running_loop().call_later(delay, self.retry_parked)

    async def drain(self) -> None:
        """Return when nothing is pending (parked exchanges do not count)."""
        while self._pending:
            self._kick()
            assert self._task is not None
            await asyncio.shield(self._task)

    async def flush(self, timeout: float) -> int:
        """Try the parked exchanges again and wait up to ``timeout`` seconds for every
        write; returns how many are still unsaved."""
        self.retry_parked()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.drain(), timeout)
        return self.unsaved

    def stop(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
