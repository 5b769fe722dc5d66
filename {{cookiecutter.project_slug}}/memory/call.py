"""One call's memory: recall for each reply, capture of each exchange, the end.

``CallMemory`` is what an agent holds; it is built from parts testable alone:
``Recaller`` (budget, single-flight cache, block), ``TurnPairing`` (which reply
answers which turn), ``ExchangeWriter`` (background saves, retries, the flush) and
``FactExtraction``. Nothing here imports LiveKit (``livekit_adapter`` does the
wiring) and nothing raises into the caller: failures are logged once per kind and the
reply goes ahead without memory.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from . import limits
from .callers import validate_caller_id
from .ending import close, extractive_summary
from .erasure import ErasureCheck
from .extraction import FactExtraction
from .figures import CallFigures, traced_save, traced_save_many
from .health import store_health
from .intake import Backlog, accept
from .limits import (
    FLUSH_TIMEOUT,
    MAX_BLOCK_CHARS,
    MIN_BLOCK_CHARS,
)
from .pairing import TurnPairing
from .privacy import masking_on
from .recall import Recaller
from .records import Exchange
from .retention import purge_in_background
from .speech import ReplyCheck
from .store import MemoryStore, NoStore, UnopenedStore
from .tools import forget, remember
from .writer import ExchangeWriter

logger = logging.getLogger("memory")


class _Part:
    """An attribute of ``CallMemory`` that lives on one of its parts."""

    def __init__(self, part: str, name: str) -> None:
        self.part, self.name = part, name

    def __get__(self, call: object, owner: type | None = None) -> Any:
        return getattr(getattr(call, self.part), self.name)

    def __set__(self, call: object, value: Any) -> None:
        setattr(getattr(call, self.part), self.name, value)


class CallMemory:
    """Memory for one call of ``caller_id`` on ``store``.

    ``CallMemory()`` (no store, ``caller_id=None``: no stable caller, or a test)
    is memory turned off: no block, nothing saved, no store opened, and the agent
    works as without memory. Feed it the conversation's messages with ``capture()``,
    ask it for each reply's block with ``block_for()``, and ``await aclose()`` when the
    call ends (``on_shutdown`` is the same, for ``JobContext.add_shutdown_callback``).

    Raises ValueError for an invalid caller id (``InvalidCallerIdError``), a
    ``max_block_chars`` below ``MIN_BLOCK_CHARS``, a ``recall_budget`` (seconds;
    default ``limits.RECALL_BUDGET`` as it is when the call starts) that is not
    positive, or a caller id without a store."""

    def __init__(
        self,
        store: MemoryStore | None = None,
        caller_id: str | None = None,
        call_id: str = "",
        *,
        recall_budget: float | None = None,
        max_block_chars: int = MAX_BLOCK_CHARS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if max_block_chars < MIN_BLOCK_CHARS:
            raise ValueError(f"max_block_chars must be at least {MIN_BLOCK_CHARS}")
        if recall_budget is None:  # read now, so a test suite can give it room
            recall_budget = limits.RECALL_BUDGET
        if recall_budget <= 0:
            raise ValueError("recall_budget must be a positive number of seconds")
        if store is None and caller_id is not None:
            raise ValueError("a caller's memory needs a store (memory.open_store())")
        self.store: MemoryStore = store if store is not None else NoStore()
        self.caller_id = (
            validate_caller_id(caller_id) if caller_id is not None else None
        )
        self.call_id = call_id
        self._warned: set[str] = set()
        self.health = store_health(self.store)  # shared by the process's calls on it
        self.figures = CallFigures(self.store, lambda: self.recall_budget, self.warn)
        key = self.caller_id or ""
        self.recaller = Recaller(
            self.store,
            key,
            call_id,
            health=self.health,
            figures=self.figures,
            warn=self.warn,
            budget=recall_budget,
            max_block_chars=max_block_chars,
            clock=clock,
        )
        self.pairing = TurnPairing(key, call_id, clock)
        self.writer = ExchangeWriter(self.store, self._save_failed)
        self.writer.save = traced_save(self.store, self.figures, self.health)
        self.writer.save_many = traced_save_many(self.store, self.figures, self.health)
        self.extraction = FactExtraction(
            self.store,
            key,
            self.pairing,
            capturing=lambda: self.capturing,
            masking=lambda: self.masking,
            warn=self.warn,
        )
        self.erasure = ErasureCheck(self)  # an erasure made meanwhile reaches the call
        self.replies = ReplyCheck(self.warn)  # the wiring self-check
        # False: nothing more of this call is saved (nor is anything, on a store
        # prewarm could not open: its ERROR already said the calls go without memory)
        self.capturing = not isinstance(self.store, UnopenedStore)
        self.masking = masking_on()  # card, id and account numbers masked before kept
        self.summarize: Callable[[list[Exchange]], Awaitable[str]] | None = None
        """Writes the call summary from this call's exchanges (e.g. with the session's
        model, see recipes/call_summary.py); None, or a failure, falls back to the
        extractive ``summary()``."""
        self.forgotten = False  # the caller had this call (or everything) forgotten
        self.screens_voicemail = False  # an outbound call: see voicemail.screened
        self.backlog = Backlog(self)  # long messages being masked, and those after
        self._started = False
        self._closed = False
        self._closing: asyncio.Task[int] | None = None

    # Settings and counts that live on the parts, read and set here too.
    recall_budget = _Part("recaller", "budget")  # seconds a reply may wait for recall
    max_block_chars = _Part("recaller", "max_block_chars")
    clock = _Part("recaller", "clock")  # seconds since the epoch, the block's "now"
    masking = _Part("recaller", "masking")  # card, id and account numbers masked
    profile = _Part("recaller", "profile")  # Recall | None: preloaded at call start
    recalls = _Part("recaller", "recalls")  # store recalls started (one per turn)
    block_requests = _Part("replies", "asked")  # block_for calls (self-check)
    trace = _Part("figures", "trace")  # Trace | None: each recall and save as a span
    extract_with = _Part("extraction", "ask")
    """(instructions, text) -> the agent model's answer. Set (the LiveKit adapter does
    it), the call's facts are extracted when it ends; None: only ``remember``."""
    extract_every = _Part("extraction", "every")
    """Also extract every this many caller turns in the background (0: at the end)."""
    extracted = _Part("extraction", "extracted")  # what extraction remembered

    @property
    def enabled(self) -> bool:
        return self.caller_id is not None

    @property
    def pending(self) -> int:
        """Exchanges accepted but not yet written (parked ones included)."""
        return self.writer.unsaved

    @property
    def exchanges(self) -> list[Exchange]:
        """This call's exchanges so far, oldest first."""
        return self.pairing.exchanges()

    def warn(self, kind: str, message: str, *args: Any) -> None:
        """Log ``message`` as a WARNING, once per ``kind`` in this call."""
        if kind not in self._warned:
            self._warned.add(kind)
            logger.warning("memory: " + message, *args)

    def _save_failed(self, exc: BaseException) -> None:
        self.warn("save", "could not save an exchange (kept, will retry): %r", exc)

    # -- recall --

    def start(self) -> None:
        """Preload the caller's profile (facts, latest call summaries) in the
        background, so the greeting and any turn whose recall is slow can use it;
        and, when retention is set (``retention.Retention.from_env``), purge what has
        expired, at most once per ``PURGE_EVERY`` seconds in this process."""
        if self.enabled and not self._started:
            self._started = True
            self.recaller.preload()
            purge_in_background(self.store)

    async def facts(self) -> dict[str, str]:
        """The caller's facts (kind -> value) from the preloaded profile, waiting for it
        at most ``recall_budget`` seconds; {} when memory is off, slow or failing."""
        if not self.enabled:
            return {}
        self.start()
        return await self.recaller.facts()

    async def block_for(self, user_text: str, *, turn: int | None = None) -> str | None:
        """The memory block for a reply to ``user_text`` (the caller's latest words,
        "" before they have spoken), within ``recall_budget`` seconds; None when
        memory is off. Never raises (a cancelled caller is the exception).

        ``turn`` (the number of user messages in the chat context) makes the recall
        single-flight per turn: every run of ``llm_node`` for the same turn and text
        (preemptive generation, steps after a tool call) shares one store recall, and
        a later turn with the same words recalls afresh. Without ``turn`` (a tool's
        lookup) every call recalls. One store recall is in flight per call at most:
        while one has not answered, a later transcript of its turn waits for it and
        any other reply goes without recall (its block says memory was not read)."""
        self.replies.asked += 1
        if not self.enabled:
            return None
        return await self.recaller.block_for(user_text, turn)

    async def lookup(self, query: str) -> str:
        """What a recall tool returns for ``query`` (the model's words for what to
        look up): the block of what matches it, facts and summaries sharing words
        with it first; ``NOTHING_MATCHED`` when nothing does. Within
        ``recall_budget`` like ``block_for``; never raises."""
        if not self.enabled:
            return "Memory is off for this call."
        return await self.recaller.lookup(query)

    # -- capture --

    def capture(
        self,
        role: str,
        item_id: str,
        text: str | None,
        *,
        interrupted: bool = False,
        created_at: float | None = None,
        speech_id: str | None = None,
    ) -> None:
        """Take one chat message as it is added to the conversation; never raises.

        ``created_at`` is the message's own time (LiveKit's ``ChatMessage.created_at``,
        seconds since the epoch: for the caller, when they started speaking; for a
        reply, when it started). ``speech_id`` is the reply that added the message
        (LiveKit's ``SpeechHandle.id``), None for a message no reply added (a realtime
        transcript, or one the app inserted itself with ``update_chat_ctx`` and hands
        over here so it is remembered). ``TurnPairing`` says how messages become
        exchanges; every changed exchange is written in the background, keyed by the
        user item id."""
        if self.enabled and self._closed:
            self.warn(
                "closed",
                "a %s message came after the call's memory was closed; not kept "
                "(close it when the session has closed)",
                role,
            )
            return
        if not self.enabled or not self.capturing:
            return
        if role == "assistant" and speech_id is not None:
            self.replies.said(speech_id)
        accept(self, (role, item_id, text, interrupted, created_at, speech_id))

    def speech_created(
        self, speech_id: str, *, within: str | None = None, asks_memory: bool = False
    ) -> None:
        """A reply (LiveKit speech ``speech_id``) has just been created; never raises.

        ``within``: the speech whose work created it (a tool's ``say`` or
        ``generate_reply``, the next agent's greeting after a handoff), so its text
        answers the same turn (see ``TurnPairing``). ``asks_memory``: the reply runs
        the agent's ``llm_node``, which should ask ``block_for``; if its text is
        captured with no ``block_for`` call in between, the log says so once per
        call (``speech.ReplyCheck``)."""
        if not self.enabled:
            return
        if within is not None:
            self.pairing.speech_within(speech_id, within)
        if asks_memory:
            self.replies.created(speech_id)

    # -- what the caller asks of memory --

    async def remember(self, kind: str, value: str, *, always: bool = False) -> str:
        """Save a fact for the caller; returns a short sentence for the model (never
        raises). Refused while capture is off (no consent, or the caller asked to be
        forgotten), unless ``always`` (the consent answer itself). See
        ``tools.remember``."""
        return await remember(self, kind, value, always=always)

    def summary(self) -> str | None:
        """This call's extractive summary (``ending.extractive_summary``)."""
        return extractive_summary(self)

    async def forget(
        self, what: str, kind: str | None = None, value: str | None = None
    ) -> str:
        """Forget at the caller's request; returns a short sentence for the model
        (never raises). ``what``: "fact" (every value of ``kind``, or with ``value``
        only that one), "everything" (every fact, summary and exchange of the caller,
        and nothing more is saved in this call) or "this_call" (this call's exchanges,
        and nothing more of it is saved). See ``tools.forget``."""
        return await forget(self, what, kind, value)

    # -- the end --

    async def flush(self, timeout: float = FLUSH_TIMEOUT) -> int:
        """Wait up to ``timeout`` seconds for pending writes (parked ones tried
        again); returns how many exchanges are still unsaved. Capture goes on (an
        agent handoff flushes here and the call continues)."""
        started = time.monotonic()
        await self.backlog.wait(timeout)
        return await self.writer.flush(max(0.0, timeout - time.monotonic() + started))

    async def aclose(self, reason: str = "", *, timeout: float = FLUSH_TIMEOUT) -> int:
        """End the call: stop capturing, flush pending writes and save the call
        summary, all within ``timeout`` seconds (``ending.close``). Returns how many
        exchanges are still unsaved (0 when everything was written); their count and
        keys are logged at ERROR level. Safe to call from several places (session
        close, job shutdown): they share one close.

        ``reason`` is what LiveKit passes a shutdown callback (the shutdown reason,
        a str); it is only logged. ``timeout`` is keyword-only for that reason."""
        if self._closing is None:
            self._closed = True
            self.recaller.cancel()
            self._closing = asyncio.create_task(
                close(self, reason, timeout), name="memory-close"
            )
        return await asyncio.shield(self._closing)

    async def on_shutdown(self, reason: str) -> None:
        """For ``JobContext.add_shutdown_callback``: LiveKit calls a shutdown callback
        that takes an argument with the shutdown reason (a str). Ends the call
        (``aclose``) within ``FLUSH_TIMEOUT`` seconds; never raises."""
        await self.aclose(reason)
