"""One call's memory figures: recall waits and saves, as trace spans while the call
runs and as one log line when it ends. Attributes hold figures, never text.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .errors import FAIL_OPEN
from .health import StoreHealth, store_generation
from .records import Exchange
from .store import MemoryStore

Trace = Callable[[str, int, int, dict[str, Any]], None]
"""A hook that records one memory operation (the LiveKit adapter makes it a span in
LiveKit's traces): its name ("memory.recall" or "memory.save"), start and end
(nanoseconds since the epoch, ``time.time_ns``) and attributes: "memory.outcome" (a
recall: "hit", "nothing known", "unavailable", "timed out" or "skipped": not asked,
the store being known to be down, see ``SKIP_DOWN_STORE_FOR``; a save: "saved",
"unavailable" or "timed out"), "memory.rows" (rows returned or written),
"memory.duration_ms" and, for a recall, "memory.budget_ms". Called on the event loop;
it must be quick."""


class CallFigures:
    """What one call's memory did. ``warn(kind, message, *args)`` logs once."""

    def __init__(
        self, store: MemoryStore, budget: Callable[[], float], warn: Callable[..., None]
    ) -> None:
        self.store = store
        self.budget = budget  # the recall budget now, seconds (spans and the log line)
        self.warn = warn
        self.trace: Trace | None = None
        self.recall_ms: list[float] = []
        # keys of the exchanges written in this call -> the store's generation then
        self.saved: dict[str, int] = {}

    def recalled(self, started: int, outcome: str, rows: int = 0) -> None:
        """A recall that began at ``started`` (``time.time_ns()``) has ended."""
        ended = time.time_ns()
        self.recall_ms.append((ended - started) / 1e6)
        budget = {"memory.budget_ms": round(self.budget() * 1000, 3)}
        self.record("memory.recall", started, ended, outcome, rows, budget)

    def wrote(self, key: str) -> None:
        """The exchange ``key`` was saved."""
        self.saved[key] = store_generation(self.store)

    def record(
        self,
        name: str,
        started: int,
        ended: int,
        outcome: str,
        rows: int,
        more: dict[str, Any],
    ) -> None:
        """Hand one operation to ``trace``; tracing never costs a reply or a save."""
        if self.trace is None:
            return
        attributes = {
            "memory.outcome": outcome,
            "memory.rows": rows,
            "memory.duration_ms": round((ended - started) / 1e6, 3),
            **more,
        }
        try:
            self.trace(name, started, ended, attributes)
        except FAIL_OPEN as exc:
            self.warn("trace", "could not record a memory span: %r", exc)

    def line(self, pending: int, lost: int) -> str:
        """The call's figures, one line for the log: recall count and p50/p95 wait
        (ms, nearest rank), exchanges saved, pending when the call ended, and lost:
        still unsaved after the final flush, plus those saved where the store has
        since lost them (``store_generation`` went up: a memory file deleted or
        replaced during the call), which are said apart and not counted as saved."""
        now = store_generation(self.store)
        gone = sum(1 for generation in self.saved.values() if generation != now)
        waits = sorted(self.recall_ms)

        def rank(q: float) -> str:
            if not waits:
                return "-"
            return f"{waits[max(0, math.ceil(q * len(waits)) - 1)]:.1f}"

        went = f" ({gone} of them went with what the store lost during the call)"
        return (
            f"{len(waits)} recalls, p50 {rank(0.5)} ms, p95 {rank(0.95)} ms (budget "
            f"{self.budget() * 1000:.0f} ms); exchanges saved {len(self.saved) - gone}, "
            f"pending {pending}, lost {lost + gone}" + (went if gone else "")
        )


def traced_save(
    store: MemoryStore, figures: CallFigures, health: StoreHealth
) -> Callable[[Exchange], Awaitable[None]]:
    """The save the call's ``ExchangeWriter`` uses: ``store.save``, recorded as a
    "memory.save" span, telling ``health`` whether the store answers."""

    async def save(exchange: Exchange) -> None:
        started, outcome = time.time_ns(), "unavailable"
        try:
            await store.save(exchange)
            outcome = "saved"
            figures.wrote(exchange.key)
            health.worked(save=True)
        except TimeoutError:
            outcome = "timed out"
            raise
        except FAIL_OPEN as exc:
            health.failed(exc, save=True)
            raise
        finally:
            rows = 1 if outcome == "saved" else 0
            figures.record("memory.save", started, time.time_ns(), outcome, rows, {})

    return save


def traced_save_many(
    store: MemoryStore, figures: CallFigures, health: StoreHealth
) -> Callable[[list[Exchange]], Awaitable[None]] | None:
    """``traced_save`` for a store's ``save_many`` (several exchanges of one caller in
    one call): one "memory.save" span with their count. None for a store whose class
    has none (a wrapper that forwards other names does not count: it would skip
    what the wrapper does around ``save``)."""
    if getattr(type(store), "save_many", None) is None:
        return None
    save_many = store.save_many  # type: ignore[attr-defined]

    async def save(exchanges: list[Exchange]) -> None:
        started, outcome = time.time_ns(), "unavailable"
        try:
            await save_many(exchanges)
            outcome = "saved"
            for exchange in exchanges:
                figures.wrote(exchange.key)
            health.worked(save=True)
        except TimeoutError:
            outcome = "timed out"
            raise
        except FAIL_OPEN as exc:
            health.failed(exc, save=True)
            raise
        finally:
            rows = len(exchanges) if outcome == "saved" else 0
            figures.record("memory.save", started, time.time_ns(), outcome, rows, {})

    return save
