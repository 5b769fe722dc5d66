"""Erasures that reach a live call: the caller forgotten while a call of theirs goes
on, in this process or another one (an operator's ``memory_admin.py forget``, the
caller's own request in another call, a retention purge of exchanges).

A fact forgotten during a call (``forget_fact_words``) goes from what holds its words
too: the value, word for word, becomes ``FORGOTTEN`` in this call's turns (so its
summary and extraction cannot find it, and its exchanges are saved again without it),
in the caller's stored call summaries and exchanges, and extraction refuses to save it
again in this call.

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
import re
import time
import weakref
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from .errors import FAIL_OPEN, MemoryStoreError
from .facts import Fact, Remembered, matching_facts
from .limits import WRITE_TIMEOUT

if TYPE_CHECKING:
    from .call import CallMemory
    from .store import MemoryStore

logger = logging.getLogger("memory")

FORGOTTEN = "[forgotten]"
"""What a forgotten fact's value is replaced by in the texts that said it."""


class ErasedError(MemoryStoreError):
    """A fact not saved: it was extracted from words said before the caller was
    forgotten."""


class ErasureCheck:
    """One call's view of erasures of its caller (``CallMemory.erasure``).

    ``apply`` reads the store's erasure time and drops the call's turns said at or
    before it (their pending saves, the summary and extraction of them); never raises.
    ``remember`` is what the call's fact extraction writes through (set here): a
    fact from a transcript read before an erasure was applied, or one the caller had
    forgotten in this call, is refused (``ErasedError``)."""

    def __init__(self, call: CallMemory) -> None:
        self.call = call
        # what the call's fact extraction writes through (it uses only remember)
        call.extraction.store = cast("MemoryStore", self)
        self.applied = 0.0  # the erasure time already applied to this call
        self.since = time.time()  # the call's start: a later erasure is during it
        self.facts: list[tuple[str, str | None]] = []  # (kind, value) forgotten here
        self.words: list[str] = []  # their values, redacted wherever they were said
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
        if self.forgotten(fact):
            raise ErasedError("not saved: the caller had this fact forgotten")
        return await self.call.store.remember(caller_id, fact, timeout=timeout)

    async def said_before(self, value: str, timeout: float) -> bool:
        """Whether the caller was forgotten during this call (read now, ``apply``,
        within ``timeout`` seconds) and ``value`` is in none of the turns said since:
        the model asking to ``remember`` words from before the erasure. False when
        the store could not say (``apply`` logs it)."""
        await self.apply(timeout)
        if self.applied <= self.since:
            return False
        held = self.call.pairing.turns
        texts = [t.user_text for t in held] + [r.text for t in held for r in t.replies]
        heard, at = self.call.recaller.heard  # the turn being answered, if since
        texts += [heard] if at > self.applied else []
        return all(redact(text, [value]) == text for text in texts)

    def forgotten(self, fact: Fact) -> bool:
        """Whether ``fact`` is one the caller had forgotten during this call."""
        return (
            any(matching_facts([fact], kind, value) for kind, value in self.facts)
            or redact(fact.value, self.words) != fact.value
        )


def redact(text: str, values: Sequence[str]) -> str:
    """``text`` with each of ``values`` replaced by ``FORGOTTEN`` wherever it stands
    word for word (any case, any spaces between its words, not inside a longer
    word). Linear: each value is a literal pattern."""
    for value in values:
        words = [re.escape(w) for w in value.split()]
        if words and text:
            pattern = r"(?<!\w)" + r"\s+".join(words) + r"(?!\w)"
            text = re.sub(pattern, FORGOTTEN, text, flags=re.IGNORECASE)
    return text


async def forget_fact_words(
    call: CallMemory, kind: str, value: str | None, values: Sequence[str]
) -> None:
    """After the fact ``kind`` (only ``value``, or every value) was forgotten at the
    caller's request, take its ``values`` out of what else holds them: this call's
    turns (its exchanges saved again), the caller's stored call summaries and
    exchanges of earlier calls; and keep extraction from saving it again. Within
    ``WRITE_TIMEOUT`` seconds; never raises (what could not be done is logged)."""
    check = call.erasure
    check.facts.append((kind, value))
    check.words += [v for v in values if v.strip()]
    words = list(check.words)
    for exchange in call.pairing.rewrite(lambda text: redact(text, words)):
        call.writer.put(exchange)
    if call.caller_id is None or not values:
        return
    try:
        await asyncio.wait_for(
            _redact_stored(call, call.caller_id, words), WRITE_TIMEOUT
        )
    except FAIL_OPEN as exc:
        call.warn(
            "forget-words",
            "a forgotten fact's words may remain in stored summaries or exchanges: %r",
            exc,
        )


async def _redact_stored(call: CallMemory, caller_id: str, words: list[str]) -> None:
    store = call.store
    for summary in await store.summaries(caller_id):
        text = redact(summary.text, words)
        if text != summary.text:
            await store.save_summary(caller_id, summary.call_id, text)
    for e in await store.exchanges(caller_id):
        if e.call_id == call.call_id:
            continue  # this call's own: its writer saves them again (above)
        user, reply = redact(e.user_text, words), redact(e.assistant_text, words)
        if (user, reply) != (e.user_text, e.assistant_text):
            await store.save(replace(e, user_text=user, assistant_text=reply))
