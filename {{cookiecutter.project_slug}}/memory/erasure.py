"""Erasures that reach a live call: the caller forgotten while a call of theirs goes
on, in this process or another one (an operator's ``memory_admin.py forget``, the
caller's own request in another call, a retention purge of exchanges).

The store records when (``MemoryStore.erased_at``) and skips, itself, every save of an
exchange created before that time, whichever process makes it. What the store cannot
see is what a live call still holds in memory: the turns said before the erasure,
from which the call's summary and its extracted facts would be written. So before a
call saves either, it reads that time once (``ErasureCheck.apply``) and drops what
was said before it; nothing is read on a reply's path.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from typing import TYPE_CHECKING, Any

from .errors import FAIL_OPEN, MemoryStoreError
from .facts import Fact, Remembered
from .limits import WRITE_TIMEOUT

if TYPE_CHECKING:
    from .call import CallMemory

logger = logging.getLogger("memory")


class ErasedError(MemoryStoreError):
    """A fact not saved: it was extracted from words said before the caller was
    forgotten."""


class ErasureCheck:
    """One call's view of erasures of its caller (``CallMemory.erasure``).

    ``apply`` reads the store's erasure time and drops the call's turns said at or
    before it (their pending saves, the summary and extraction of them); never raises.
    ``remember`` is what the call's fact extraction writes through: a fact from a
    transcript read before an erasure was applied is refused (``ErasedError``)."""

    def __init__(self, call: CallMemory) -> None:
        self.call = call
        self.applied = 0.0  # the erasure time already applied to this call
        self._checked: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()
        self._stale: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()

    async def apply(self, timeout: float = WRITE_TIMEOUT) -> int:
        """Read when the caller was last erased (within ``timeout`` seconds) and drop
        what this call holds from before then (the store itself skips the saves of
        those exchanges still pending); returns how many of the caller's
        turns were dropped (0 too when the store could not say: logged once)."""
        call = self.call
        if call.caller_id is None:
            return 0
        try:
            erased = await asyncio.wait_for(
                call.store.erased_at(call.caller_id), max(0.0, timeout)
            )
        except FAIL_OPEN as exc:
            call.warn("erased", "could not check for an erasure of the caller: %r", exc)
            return 0
        if erased <= self.applied:
            return 0
        self.applied = erased
        held = call.pairing.turns
        upto = call.extraction.upto  # extraction's place, by turn
        gone_before_upto = sum(1 for t in held[:upto] if t.at <= erased)
        dropped = call.pairing.drop_before(erased)
        call.extraction.upto = max(0, upto - gone_before_upto)
        running = call.extraction.task
        if running is not None and not running.done():
            self._stale.add(running)  # it read a transcript from before the erasure
        call.recaller.forgotten(None, None, everything=True)
        if dropped:
            logger.warning(
                "memory: caller %s was forgotten at %s, during call %s: the %d turn(s) "
                "said before then are not saved, summarised or extracted",
                call.caller_id,
                time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(erased)),
                call.call_id,
                dropped,
            )
        return dropped

    async def remember(
        self, caller_id: str, fact: Fact, *, timeout: float = WRITE_TIMEOUT
    ) -> Remembered:
        """``MemoryStore.remember`` for fact extraction: the first fact of each
        extraction run checks for an erasure first (``apply``); a run that read the
        call's transcript before an erasure was applied saves nothing more."""
        task = asyncio.current_task()
        if task is not None and task not in self._checked:
            self._checked.add(task)
            if await self.apply(timeout / 2):
                self._stale.add(task)
        if task is not None and task in self._stale:
            raise ErasedError(
                "not saved: extracted from words said before the caller was forgotten"
            )
        return await self.call.store.remember(caller_id, fact, timeout=timeout)
