"""Retention: how long memory is kept, and the purge that applies it.

Set per kind in days (``MEMORY_KEEP_EXCHANGES_DAYS``, ``MEMORY_KEEP_SUMMARIES_DAYS``,
``MEMORY_KEEP_FACTS_DAYS``); each worker process purges at most once per
``PURGE_EVERY`` seconds, off every reply's path, and ``memory_admin.py purge`` does it
on demand.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from dataclasses import dataclass

from .errors import FAIL_OPEN
from .store import PURGEABLE, MemoryStore

logger = logging.getLogger("memory")


PURGE_EVERY = 3600.0
"""Seconds between background purges in one worker process (when retention is set)."""


@dataclass(frozen=True)
class Retention:
    """How long memory is kept, in days, per kind; None keeps it forever (the default).
    From the environment: MEMORY_KEEP_EXCHANGES_DAYS, MEMORY_KEEP_SUMMARIES_DAYS,
    MEMORY_KEEP_FACTS_DAYS (empty or unset: forever). Facts age from their last update."""

    exchanges_days: float | None = None
    summaries_days: float | None = None
    facts_days: float | None = None

    @classmethod
    def from_env(cls) -> Retention:
        """Raises ValueError naming the variable when one is not a positive number."""
        days: dict[str, float | None] = {}
        for what in PURGEABLE:
            name = f"MEMORY_KEEP_{what.upper()}_DAYS"
            raw = os.getenv(name, "").strip()
            try:
                days[f"{what}_days"] = float(raw) if raw else None
            except ValueError:
                raise ValueError(f"{name}={raw!r} is not a number of days") from None
            value = days[f"{what}_days"]
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name}={raw!r} must be a positive number of days")
        return cls(**days)

    @property
    def any(self) -> bool:
        return any(getattr(self, f"{what}_days") is not None for what in PURGEABLE)


async def purge_expired(
    store: MemoryStore, retention: Retention, *, now: float | None = None
) -> dict[str, int]:
    """Delete what is older than ``retention`` allows; returns {kind: rows deleted}."""
    now = time.time() if now is None else now
    deleted: dict[str, int] = {}
    for what in PURGEABLE:
        days = getattr(retention, f"{what}_days")
        if days is not None:
            deleted[what] = await store.purge(before=now - days * 86_400.0, what=what)
    return deleted


_last_purge: dict[int, float] = {}  # id(store) -> monotonic time of the last purge
_background: set[asyncio.Task[None]] = (
    set()
)  # held, so a running purge is not collected


def purge_in_background(store: MemoryStore) -> None:
    # At most once per PURGE_EVERY per store (per worker process), off every reply's
    # path; a failure is logged and tried again at the next interval.
    try:
        retention = Retention.from_env()
    except ValueError as exc:
        if _last_purge.setdefault(id(store), -math.inf) == -math.inf:
            logger.error("memory: retention is not applied: %s", exc)
            _last_purge[id(store)] = time.monotonic()
        return
    last = _last_purge.get(id(store), -math.inf)
    if not retention.any or time.monotonic() - last < PURGE_EVERY:
        return
    _last_purge[id(store)] = time.monotonic()

    async def purge() -> None:
        try:
            deleted = await purge_expired(store, retention)
            logger.info("memory: retention purge deleted %s", deleted)
        except FAIL_OPEN as exc:
            logger.warning(
                "memory: retention purge failed (tried again later): %r", exc
            )

    task = asyncio.create_task(purge(), name="memory-retention")
    _background.add(task)
    task.add_done_callback(_background.discard)
