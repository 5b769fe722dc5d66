"""Store health: whether a store was last seen unreachable, shared by every call
on it in this process, so an outage costs one reply's wait, not every reply's.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Callable
from typing import Any

from .errors import FAIL_OPEN, StoreUnavailableError
from .limits import SKIP_DOWN_STORE_FOR
from .store import MemoryStore

logger = logging.getLogger("memory")


class StoreHealth:
    """Whether a store was last seen unreachable, shared by every call on that store
    object in this process (``store_health``), so an outage costs one reply's wait,
    not every reply's (``SKIP_DOWN_STORE_FOR``).

    ``failed`` (a recall, preload or save raised ``StoreUnavailableError``) starts the
    skipping, and so does ``hung`` (a recall still unanswered after
    ``RECALL_HUNG_AFTER`` s while no other recall answered); ``skip()`` says whether a recall should not go to the store now, and
    is False once each ``SKIP_DOWN_STORE_FOR`` seconds for the probe. A recall that
    succeeds ends it, and so does a save that succeeds after a save failed (a store
    with a local outbox accepts saves while its service is down, so a save says
    nothing of recall). Logs the change once per outage: WARNING down, INFO back."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock  # seconds, monotonic
        self.down = False
        self.saves_failed = False
        self.probe_at = 0.0
        self.skipped = 0  # recalls not sent to the store (for tests and metrics)
        self.answered_at = float("-inf")  # when a recall last answered (clock)

    def failed(self, exc: BaseException, *, save: bool = False) -> None:
        if not isinstance(exc, StoreUnavailableError):
            return  # a slow answer or a bad row is not an unreachable store
        if not self.down:
            logger.warning(
                "memory: the store is unavailable (%s); replies go without recall, "
                "trying it again every %g s",
                exc,
                SKIP_DOWN_STORE_FOR,
            )
        self.down = True
        self.saves_failed = self.saves_failed or save
        self.probe_at = self.clock() + SKIP_DOWN_STORE_FOR

    def hung(self, started: float, seconds: float) -> None:
        """A recall started at ``started`` (``clock``) has not answered in
        ``seconds``: unless another recall answered since it started (the store
        answers; that one query is slow), the store is taken for down, as if it had
        raised ``StoreUnavailableError``."""
        if self.answered_at < started:
            self.failed(
                StoreUnavailableError(f"a recall has not answered in {seconds:g} s")
            )

    def worked(self, *, save: bool = False) -> None:
        if not self.down or (save and not self.saves_failed):
            return
        self.down = self.saves_failed = False
        logger.info("memory: the store answers again; replies recall from it")

    def skip(self) -> bool:
        """True: answer without the store now. False while up, and once per
        ``SKIP_DOWN_STORE_FOR`` while down (that recall is the probe)."""
        if not self.down:
            return False
        if self.clock() >= self.probe_at:
            self.probe_at = self.clock() + SKIP_DOWN_STORE_FOR
            return False
        self.skipped += 1
        return True

    def watch(self, task: asyncio.Task[Any]) -> None:
        """Take the outcome of a recall task (as a done callback)."""
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            self.answered_at = self.clock()
            self.worked()
        else:
            self.failed(exc)


def store_generation(store: MemoryStore) -> int:
    """The store's ``generation``, an optional int attribute that goes up each time
    everything written before is gone (SQLite: the memory file was deleted or replaced
    while in use); 0 for a store without one. Never raises."""
    try:
        generation = getattr(store, "generation", 0)
    except FAIL_OPEN:
        return 0
    return generation if isinstance(generation, int) else 0


_HEALTH: weakref.WeakKeyDictionary[Any, StoreHealth] = weakref.WeakKeyDictionary()


def store_health(store: MemoryStore) -> StoreHealth:
    """The ``StoreHealth`` of ``store`` in this process (one per store object; a new
    one, not shared, for a store that cannot be weakly referenced)."""
    try:
        return _HEALTH.setdefault(store, StoreHealth())
    except TypeError:
        return StoreHealth()
