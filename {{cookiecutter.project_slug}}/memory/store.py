"""The store interface (``MemoryStore``) every backend implements, and
``open_store``, which opens the backend a URL names.

Backends are modules of this package (``sqlite_store``, ``postgres_store``,
``supermemory_store``, ``mem0_store``, ``zep_store``), imported only when their URL
is opened, so a backend's driver is needed only where it is used.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import re
from pathlib import Path
from typing import Any, Protocol

from .errors import FAIL_OPEN, InvalidStoreUrlError, StoreUnavailableError
from .facts import Fact, Remembered
from .limits import RECALL_EXCHANGES, WRITE_TIMEOUT
from .places import default_url
from .records import Exchange, Recall, Summary

logger = logging.getLogger("memory")


class MemoryStore(Protocol):
    """What a backend implements; every method CallMemory (and the tests) use.

    One store per worker process, opened in ``prewarm`` by ``open_store`` and shared
    by the calls that process runs; every method is a coroutine that never blocks
    the event loop. Arguments come checked by this module (caller ids by
    ``validate_caller_id``, facts built with ``Fact.of``, exchanges by
    ``CallMemory``): a store does not check them again.

    Errors: a store raises ``StoreUnavailableError`` (or its own driver's error) when it
    cannot do the work; CallMemory turns every failure into fail-open behaviour.
    Reads of a caller never return another caller's rows.
    """

    async def save(self, exchange: Exchange) -> None:
        """Insert or replace one exchange by ``exchange.key`` (a retried save never
        doubles; the newest version wins)."""
        ...

    async def remember(
        self, caller_id: str, fact: Fact, *, timeout: float = WRITE_TIMEOUT
    ) -> Remembered:
        """Save a fact, reconciled with the caller's current values of its kind by
        ``reconcile`` (read and written in one transaction): a known value is
        confirmed, a kind that takes one value has the old one moved to history, a
        kind that takes many gains one. Applied within ``timeout`` seconds or not at
        all: when this raises, nothing changed. Returns what happened."""
        ...

    async def save_summary(self, caller_id: str, call_id: str, text: str) -> None:
        """Insert or replace the summary of one call."""
        ...

    async def forget(
        self,
        caller_id: str,
        *,
        kind: str | None = None,
        value: str | None = None,
        call_id: str | None = None,
        timeout: float = WRITE_TIMEOUT,
    ) -> int:
        """Delete the facts of one kind (``kind``, already normalised; with
        ``value``, only that value, ``matching_facts``; history included), one call
        (``call_id``: its exchanges and summary) or, with none, everything about the
        caller, search index entries included. Applied within ``timeout`` seconds or
        not at all. Returns the number of rows (fact values, summaries, exchanges)
        deleted."""
        ...

    async def erased_at(self, caller_id: str) -> float:
        """When the caller's memory was last erased (``forget`` of everything, or a
        retention purge of exchanges, which counts for every caller), in seconds since
        the epoch; 0.0 when never. ``forget`` records it and, from then on, ``save``
        skips an exchange created before it, in every process; a live call reads it
        (once, at its end) before it saves a summary or extracted facts, so nothing
        said before an erasure comes back after it (``call.CallMemory``)."""
        ...

    async def history(self, caller_id: str) -> list[Fact]:
        """The values newer ones replaced (``replaced_at`` set), latest replacement
        first: for export and for tests; never in the block."""
        ...

    async def profile(self, caller_id: str) -> Recall:
        """Current facts (newest first) and the ``RECENT_SUMMARIES`` latest call summaries:
        what is known without a query. No exchanges."""
        ...

    async def recall(
        self,
        caller_id: str,
        query: str,
        *,
        limit: int = RECALL_EXCHANGES,
        exclude_call_id: str | None = None,
    ) -> Recall:
        """The profile plus the ``limit`` past exchanges that best match ``query`` (the
        caller's latest words), best first, leaving out those of ``exclude_call_id``
        (the current call, already in the chat context). A query with nothing to
        search for returns no exchanges; query text is never interpreted as syntax."""
        ...

    async def exchanges(
        self, caller_id: str, *, call_id: str | None = None
    ) -> list[Exchange]:
        """Every stored exchange of the caller (of one call, with ``call_id``), oldest
        first: for export, for resuming a call, and for tests."""
        ...

    async def summaries(self, caller_id: str) -> list[Summary]:
        """Every call summary of the caller, newest first (for export)."""
        ...

    async def callers(self, *, after: str = "", limit: int = 100) -> list[str]:
        """Caller ids that have anything stored, in ascending order, the first ``limit``
        of those greater than ``after`` (page by passing the last one back)."""
        ...

    async def purge(self, *, before: float, what: str) -> int:
        """Retention: delete every caller's ``what`` ("exchanges", "summaries" or
        "facts") stored before ``before`` (seconds since the epoch; facts by
        ``updated_at``), index entries included. Returns the number deleted. Raises
        ValueError for another ``what``."""
        ...

    async def stats(self) -> dict[str, int]:
        """Counts for operators: {"callers", "exchanges", "facts", "summaries"};
        "facts" counts every stored value, history included."""
        ...

    async def close(self) -> None:
        """Finish queued work and release connections. Idempotent."""
        ...


PURGEABLE = ("exchanges", "summaries", "facts")
"""What ``MemoryStore.purge`` can delete by age."""


BACKENDS = {
    "sqlite": "sqlite_store",
    "postgresql": "postgres_store",
    "postgres": "postgres_store",
    "supermemory": "supermemory_store",
    "mem0": "mem0_store",
    "zep": "zep_store",
}
"""URL scheme -> the module of this package that opens it. Add a line here to add a
backend (README, "Adding a backend")."""

SPOOLED = ("sqlite_store", "postgres_store")
"""Backends ``open_store`` gives a spool (spool.py); a hosted backend's outbox is
its spool."""

DRIVERS = {
    "postgres_store": "psycopg[binary,pool]",
    "supermemory_store": "httpx2",
    "mem0_store": "httpx2",
    "zep_store": "httpx2",
}
"""What each backend needs installed besides this folder's own dependencies."""


def open_store(
    url: str | None = None, *, create: bool = True, fail_open: bool = False
) -> MemoryStore:
    """Open the store a URL names, once per process (agent.py does it in ``prewarm``,
    with ``fail_open=True``).

    ``url`` (default: the ``MEMORY_URL`` environment variable) picks the backend by
    its scheme (``BACKENDS``; ``+driver`` suffixes are ignored): ``sqlite:///...``
    opens ``sqlite_store``, ``postgresql://...`` opens ``postgres_store``, and so
    on. Empty or unset means the project's default (``places.default_url``: its
    pyproject.toml's ``[tool.livekit-memory] url``, else a SQLite file in the data
    folder). Spaces around the URL are ignored.

    A SQLite or PostgreSQL store comes with its spool (``spool.spooled``: what a
    call saves is on the worker's disk first, and reaches the store from this or a
    later process).

    ``create=False`` (what reads for an operator use) opens only a store that exists:
    a backend that would create one (SQLite: a file not there) raises
    ``StoreUnavailableError`` naming where it looked, so a mistyped URL is not taken
    for an empty store; a backend that creates nothing on opening ignores it.

    Raises ``InvalidStoreUrlError`` when no backend matches the scheme or its driver
    is not installed, and whatever the backend's ``open_store(url)`` raises
    (``SchemaMismatchError``, ``StoreUnavailableError``, ``InvalidStoreUrlError``)
    when it cannot be used; the message names the URL.

    ``fail_open=True`` (a worker's prewarm) raises nothing instead: a store that
    cannot be opened (a bad URL, a missing driver or key, a memory file that is not
    a database) is logged once as an ERROR saying why, and the ``UnopenedStore``
    returned refuses every read and write with that reason, so each call goes on
    without memory instead of the worker taking no calls at all.
    """
    if not fail_open:
        return _open(url, create)
    try:
        return _open(url, create)
    except FAIL_OPEN as exc:
        logger.error("memory: calls go on without memory: %s", exc)
        return _spooled_unopened(url, UnopenedStore(str(exc)))


def _spooled_unopened(url: str | None, store: UnopenedStore) -> MemoryStore:
    # A SQLite memory file that cannot be opened (damaged, locked past the wait)
    # still has its spool beside it: what calls save waits there, and a later
    # process delivers it once the file is mended, rather than going nowhere.
    url = _url(url, log=False)
    if _scheme(url) != "sqlite":
        return store
    from .spool import spooled  # here: spool imports this module
    from .sqlite_store import path_of

    try:
        store.path = path_of(url)
    except FAIL_OPEN:  # not a SQLite URL after all: no place for a spool
        return store
    return spooled(store)


def _url(url: str | None, *, log: bool = True) -> str:
    # the URL given, else MEMORY_URL, else the project's default
    url = (url if url is not None else os.getenv("MEMORY_URL", "")).strip()
    if not url:
        url = default_url()
        if log:
            logger.info("memory: MEMORY_URL is unset; the project's default: %s", url)
    return url


def _scheme(url: str) -> str:
    # the backend's name in a URL: "postgresql+psycopg://" is "postgresql"
    return url.split(":", 1)[0].split("+", 1)[0].lower()


def _open(url: str | None, create: bool) -> MemoryStore:
    url = _url(url)
    scheme = _scheme(url)
    if ":" not in url or not re.fullmatch(r"[a-z][a-z0-9]*", scheme):
        raise InvalidStoreUrlError(
            f"MEMORY_URL {redact_url(url)!r} is not a URL such as "
            "sqlite:///data/memory.db"
        )
    name = BACKENDS.get(scheme)
    if name is None:
        raise InvalidStoreUrlError(
            f"MEMORY_URL {redact_url(url)!r}: no backend for {scheme!r} "
            f"(known: {', '.join(sorted(BACKENDS))})"
        )
    try:
        module = importlib.import_module(f"{__package__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.startswith(__package__ or "memory"):
            raise
        raise InvalidStoreUrlError(
            f"MEMORY_URL {redact_url(url)!r} needs {DRIVERS.get(name, exc.name)}, which "
            f"is not installed (no module {exc.name!r}); add it to your dependencies"
        ) from None
    return _open_with(module, url, create)


def _open_with(module: Any, url: str, create: bool) -> MemoryStore:
    # Only a backend whose open_store takes ``create`` can create a store on opening.
    if not create and "create" in inspect.signature(module.open_store).parameters:
        opened: MemoryStore = module.open_store(url, create=False)
    else:
        opened = module.open_store(url)
    if module.__name__.rsplit(".", 1)[-1] not in SPOOLED:
        return opened
    from .spool import spooled  # here: spool imports this module

    return spooled(opened, create=create)


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***``, for logs and error messages."""
    return re.sub(r"(//[^:/@]*:)[^@/]*@", r"\1***@", url)


class NoStore:
    """The store of a call whose memory is off (``CallMemory()``): holds nothing,
    opens nothing. Reads find nothing; writes raise ``StoreUnavailableError``."""

    async def save(self, exchange: Exchange) -> None:
        raise StoreUnavailableError("memory is off for this call")

    async def remember(
        self, caller_id: str, fact: Fact, *, timeout: float = WRITE_TIMEOUT
    ) -> Remembered:
        raise StoreUnavailableError("memory is off for this call")

    async def save_summary(self, caller_id: str, call_id: str, text: str) -> None:
        raise StoreUnavailableError("memory is off for this call")

    async def forget(
        self,
        caller_id: str,
        *,
        kind: str | None = None,
        value: str | None = None,
        call_id: str | None = None,
        timeout: float = WRITE_TIMEOUT,
    ) -> int:
        return 0

    async def erased_at(self, caller_id: str) -> float:
        return 0.0

    async def history(self, caller_id: str) -> list[Fact]:
        return []

    async def profile(self, caller_id: str) -> Recall:
        return Recall()

    async def recall(
        self,
        caller_id: str,
        query: str,
        *,
        limit: int = RECALL_EXCHANGES,
        exclude_call_id: str | None = None,
    ) -> Recall:
        return Recall()

    async def exchanges(
        self, caller_id: str, *, call_id: str | None = None
    ) -> list[Exchange]:
        return []

    async def summaries(self, caller_id: str) -> list[Summary]:
        return []

    async def callers(self, *, after: str = "", limit: int = 100) -> list[str]:
        return []

    async def purge(self, *, before: float, what: str) -> int:
        return 0

    async def stats(self) -> dict[str, int]:
        return {"callers": 0, "exchanges": 0, "facts": 0, "summaries": 0}

    async def close(self) -> None:
        return None


class UnopenedStore(NoStore):
    """The store of a worker whose store could not be opened (``open_store(...,
    fail_open=True)``): every read and write raises ``StoreUnavailableError`` with
    ``reason``, so recall says memory could not be read and the writes are logged as
    not saved; ``close`` does nothing."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.path: Path | None = None  # a SQLite store's file: its spool goes beside

    def _refuse(self) -> StoreUnavailableError:
        return StoreUnavailableError(f"the store was not opened: {self.reason}")

    async def save(self, exchange: Exchange) -> None:
        raise self._refuse()

    async def remember(
        self, caller_id: str, fact: Fact, *, timeout: float = WRITE_TIMEOUT
    ) -> Remembered:
        raise self._refuse()

    async def save_summary(self, caller_id: str, call_id: str, text: str) -> None:
        raise self._refuse()

    async def forget(
        self,
        caller_id: str,
        *,
        kind: str | None = None,
        value: str | None = None,
        call_id: str | None = None,
        timeout: float = WRITE_TIMEOUT,
    ) -> int:
        raise self._refuse()

    async def history(self, caller_id: str) -> list[Fact]:
        raise self._refuse()

    async def profile(self, caller_id: str) -> Recall:
        raise self._refuse()

    async def recall(
        self,
        caller_id: str,
        query: str,
        *,
        limit: int = RECALL_EXCHANGES,
        exclude_call_id: str | None = None,
    ) -> Recall:
        raise self._refuse()

    async def exchanges(
        self, caller_id: str, *, call_id: str | None = None
    ) -> list[Exchange]:
        raise self._refuse()

    async def summaries(self, caller_id: str) -> list[Summary]:
        raise self._refuse()

    async def callers(self, *, after: str = "", limit: int = 100) -> list[str]:
        raise self._refuse()

    async def purge(self, *, before: float, what: str) -> int:
        raise self._refuse()

    async def stats(self) -> dict[str, int]:
        raise self._refuse()
