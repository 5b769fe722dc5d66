"""Recall for one call: the caller's profile preloaded at call start, and each
reply's memory block within a hard time budget, one store recall per user turn.

Fail-open: a slow, failing or absent store gives the reply a block that says memory
could not be read (with the preloaded profile, if any), never a late or failed
reply. Warnings are logged once per kind and call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from .block import NOTHING_MATCHED, format_block, showable
from .dates import time_line, zone_or_utc
from .errors import FAIL_OPEN
from .facts import Fact, fact_label, kind_takes_many, matching_facts, value_key
from .figures import CallFigures
from .health import StoreHealth
from .limits import MAX_QUERY_CHARS, RECALL_HUNG_AFTER
from .privacy import mask_sensitive
from .records import Recall
from .store import MemoryStore
from .words import query_words, relevance

Warn = Callable[..., None]
"""``warn(kind, message, *args)``: log a warning once per kind and call."""


class Recaller:
    """The read side of a ``CallMemory``: preload, the per-turn single-flight cache,
    the probe of a store known to be down, and the block or lookup text.

    ``budget`` is seconds a reply may wait; ``max_block_chars`` the block's cap;
    ``clock`` gives the time the block says "now" is (seconds since the epoch)."""

    def __init__(
        self,
        store: MemoryStore,
        caller_id: str,
        call_id: str,
        *,
        health: StoreHealth,
        figures: CallFigures,
        warn: Warn,
        budget: float,
        max_block_chars: int,
        clock: Callable[[], float],
    ) -> None:
        self.store = store
        self.caller_id = caller_id
        self.call_id = call_id
        self.health = health
        self.figures = figures
        self.warn = warn
        self.budget = budget
        self.max_block_chars = max_block_chars
        self.clock = clock
        self.masking = True
        self.profile: Recall | None = None
        self.recalls = 0  # store recalls started (one per user turn, for tests/metrics)
        # the caller's latest words a reply was asked for, and when (erasure.py: the
        # turn a tool call answers may not be captured yet)
        self.heard: tuple[str, float] = ("", 0.0)
        self._recall_tasks: dict[tuple[int | None, str], asyncio.Task[Recall]] = {}
        self._probe: asyncio.Task[Recall] | None = None  # a recall no reply waits for
        self._inflight: asyncio.Task[Recall] | None = None  # the latest store recall
        self._inflight_turn: int | None = None  # the turn it was started for
        self._preload: asyncio.Task[None] | None = None

    # -- the profile --

    def preload(self) -> None:
        """Start loading the caller's facts and latest call summaries (once)."""
        if self._preload is None:
            self._preload = asyncio.create_task(self._load(), name="memory-preload")

    async def _load(self) -> None:
        try:
            self.profile = await self.store.profile(self.caller_id)
        except FAIL_OPEN as exc:
            self.health.failed(exc)
            self.warn("preload", "could not preload the caller profile: %r", exc)

    async def facts(self) -> dict[str, str]:
        """Kind -> value from the preloaded profile, waiting at most the budget; {}
        when slow or failing (so a caller is never taken for someone they are not)."""
        self.preload()
        assert self._preload is not None
        if self.health.down and not self._preload.done():
            return {}  # the store is known to be down: no wait for it
        try:
            await asyncio.wait_for(asyncio.shield(self._preload), self.budget)
        except asyncio.CancelledError:
            if _being_cancelled():
                raise
            return {}
        except FAIL_OPEN:
            return {}
        return {f.kind: f.value for f in self.profile.facts} if self.profile else {}

    def remembered(self, fact: Fact) -> tuple[Fact, ...]:
        """Keep the profile in step with a fact just saved; returns the other values
        of its kind (for a kind that takes many, those still on file)."""
        if self.profile is None:
            return ()
        others = tuple(
            f
            for f in self.profile.facts
            if f.kind == fact.kind and value_key(f.value) != value_key(fact.value)
        )
        kept = [f for f in self.profile.facts if f.kind != fact.kind]
        if kind_takes_many(fact.kind):
            kept += others
        self.profile = Recall((fact, *kept), self.profile.summaries)
        return others

    def forgotten(self, kind: str | None, value: str | None, everything: bool) -> None:
        """Drop from the cache, and from the profile, what was just forgotten: every
        fact and summary (``everything``), or the facts ``matching_facts`` names."""
        self._recall_tasks.clear()
        if everything:
            self.profile = Recall()
        elif kind is not None and self.profile is not None:
            dropped = matching_facts(self.profile.facts, kind, value)
            kept = tuple(f for f in self.profile.facts if f not in dropped)
            self.profile = Recall(kept, self.profile.summaries)

    # -- recall --

    async def block_for(self, user_text: str, turn: int | None) -> str:
        """The memory block for a reply to ``user_text``, within the budget. With
        ``turn`` the store recall is shared by every request of that turn."""
        user_text = user_text[-MAX_QUERY_CHARS:]  # bounded before any pass over it
        self.heard = (user_text, time.time())
        recall = await self.recall_in_time(user_text, turn)
        if recall is None:
            return await self.render(self.profile, partial=True)
        return await self.render(recall, query=user_text)

    async def lookup(self, query: str) -> str:
        """What a recall tool returns for ``query``: the block of what matches it,
        or ``NOTHING_MATCHED``."""
        query = query[-MAX_QUERY_CHARS:]
        recall = await self.recall_in_time(query, None)
        if recall is None:  # not read in time, or failed: the block says so
            return await self.render(self.profile, partial=True)
        return await asyncio.to_thread(self._matching, bounded(recall) or recall, query)

    def _matching(self, recall: Recall, query: str) -> str:
        asked = query_words(query)
        found = replace(
            recall,
            facts=tuple(
                f
                for f in recall.facts
                if relevance(asked, f"{fact_label(f.kind)} {f.value}")
            ),
            summaries=tuple(s for s in recall.summaries if relevance(asked, s.text)),
        )
        if found.empty:
            nothing = NOTHING_MATCHED.format(query=" ".join(query.split()))
            return f"{nothing}\n{time_line(self.clock(), zone_or_utc())}"
        return self.block(found, query=query)

    async def recall_in_time(self, user_text: str, turn: int | None) -> Recall | None:
        """The store's recall within the budget; None (warned once) when slow or
        failing, or at once when the store is known to be down."""
        key = (turn, " ".join(user_text.split()).lower())
        task = self._recall_tasks.get(key) if turn is not None else None
        if task is None and self._inflight is not None and not self._inflight.done():
            # One recall in flight per call: a slow caller holds one reader of the
            # store, never all of them. An earlier transcript of this same turn
            # shares it; any other reply goes without it until it answers.
            if (
                turn is None
                or self._inflight_turn != turn
                or self._inflight is self._probe
            ):
                self.figures.recalled(time.time_ns(), "skipped")
                self.warn(
                    "busy",
                    "a recall of this call has not answered yet; replying without "
                    "memory until it does",
                )
                return None
            task = self._inflight
        probe = False
        if task is None and self.health.down:
            if self.health.skip():  # known to be down: no wait, the block says so
                self.figures.recalled(time.time_ns(), "skipped")
                return None
            probe = True  # tried in the background; this reply does not wait
        if task is None:
            task = self._start(user_text, turn)
            if turn is not None and not probe:  # a probe is waited for by no reply
                # earlier turns' recalls are never asked for again
                self._recall_tasks = {
                    k: t for k, t in self._recall_tasks.items() if (k[0] or 0) >= turn
                }
                self._recall_tasks[key] = task
        started = time.time_ns()
        if probe:
            self._probe = task  # cancel() cancels it with the turns' recalls
            self.figures.recalled(started, "skipped")
            return None
        try:
            recall = await asyncio.wait_for(asyncio.shield(task), self.budget)
        except TimeoutError:
            self.figures.recalled(started, "timed out")
            self.warn(
                "slow",
                "recall took longer than %.2f s; replying without it",
                self.budget,
            )
            return None
        except asyncio.CancelledError:
            if _being_cancelled():
                raise
            self.figures.recalled(started, "unavailable")
            return None
        except FAIL_OPEN as exc:
            self.figures.recalled(started, "unavailable")
            self.warn("recall", "recall failed, replying without memory: %r", exc)
            return None
        rows = len(recall.facts) + len(recall.summaries) + len(recall.exchanges)
        self.figures.recalled(started, "nothing known" if recall.empty else "hit", rows)
        return recall

    def _start(self, user_text: str, turn: int | None) -> asyncio.Task[Recall]:
        self.recalls += 1
        task = asyncio.create_task(
            self.store.recall(
                self.caller_id,
                # a spoken card number is not sent to a search service either
                mask_sensitive(user_text) if self.masking else user_text,
                exclude_call_id=self.call_id,
            ),
            name="memory-recall",
        )
        task.add_done_callback(_consume_exception)
        task.add_done_callback(self.health.watch)
        # A store that hangs instead of raising is skipped like one that fails.
        started = self.health.clock()
        hang = asyncio.get_running_loop().call_later(
            RECALL_HUNG_AFTER, self.health.hung, started, RECALL_HUNG_AFTER
        )
        task.add_done_callback(lambda _: hang.cancel())
        self._inflight, self._inflight_turn = task, turn
        return task

    async def render(
        self, recall: Recall | None, *, partial: bool = False, query: str = ""
    ) -> str:
        """``block`` off the event loop, on a thread (where the GIL hands the loop
        back every 5 ms), over rows bounded by ``bounded``: ranking and
        quoting are linear, but 24 exchanges of a few thousand characters each would
        still hold the loop for tens of milliseconds (benchmarks/event_loop.py)."""
        return await asyncio.to_thread(
            self.block, bounded(recall), partial=partial, query=query
        )

    def block(
        self, recall: Recall | None, *, partial: bool = False, query: str = ""
    ) -> str:
        """``format_block`` for this call; a row no block can show is left out, and
        never costs the reply (which waits on this inside ``llm_node``)."""

        def render(recall: Recall | None, partial: bool) -> str:
            return format_block(
                recall,
                max_chars=self.max_block_chars,
                partial=partial,
                now=self.clock(),
                query=query,
            )

        try:
            return render(recall, partial)
        except FAIL_OPEN as exc:
            # A row of another type (a hand edit, another program; a service's odd
            # answer) is left out instead.
            self.warn("show", "could not show a remembered row; left out: %r", exc)
        try:
            shown = showable(recall, query) if recall is not None else None
            return render(shown, partial or shown is None or shown.empty)
        except FAIL_OPEN:
            return render(None, True)

    def cancel(self) -> None:
        """Cancel the preload, the turns' recalls and a running probe (call end)."""
        tasks: list[Any] = [self._preload, self._probe, self._inflight]
        tasks += self._recall_tasks.values()
        for task in tasks:
            if task is not None and not task.done():
                task.cancel()


def bounded(recall: Recall | None) -> Recall | None:
    """``recall`` with each exchange side and summary clipped to ``MAX_QUERY_CHARS``
    for the block (which shows ``TURN_CHARS`` of each side, and ranks by words); a
    row of another type is left as it is, for ``Recaller.block`` to leave out."""
    if recall is None:
        return None

    def clip(text: Any) -> Any:
        return text[:MAX_QUERY_CHARS] if isinstance(text, str) else text

    try:
        return replace(
            recall,
            summaries=tuple(replace(s, text=clip(s.text)) for s in recall.summaries),
            exchanges=tuple(
                replace(
                    e,
                    user_text=clip(e.user_text),
                    assistant_text=clip(e.assistant_text),
                )
                for e in recall.exchanges
            ),
        )
    except FAIL_OPEN:
        return recall


def _being_cancelled() -> bool:
    # Tells our own cancellation (propagate it) from a recall task cancelled by
    # cancel() while a reply waited on it (answer without memory instead).
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _consume_exception(task: asyncio.Task[Any]) -> None:
    # A recall nobody waited for (timed out) must not log "exception never retrieved".
    if not task.cancelled():
        task.exception()
