"""What the hosted memory backends share (supermemory_store.py, mem0_store.py, zep_store.py).

Each of those files is a small ``Service``: the service's own HTTP calls. This file
turns a Service into a ``MemoryStore``, with the outbox (outbox.py) in between:
every write goes first to a local SQLite file on the worker, then to the service in
the background, so an outage or a worker killed mid-call loses nothing. The outbox
is the spool every backend has (spool.py has the design): the same file format,
group commit and delivery loop; here it also keeps the record of what was sent.

- ``Service``: what a backend file subclasses; every call goes through ``Http``
  (hosted_http.py: one ``httpx2.AsyncClient`` per process, made in ``open_store``,
  LiveKit's prewarm, and bound to the job's event loop on first use, a timeout on
  every call, 429 + ``Retry-After`` / ``X-RateLimit-*`` honoured, errors mapped to
  memory's error family);
- ``HostedStore``: MemoryStore over a Service and an Outbox: reads that merge the
  outbox with the service (hosted_merge.py), forgetting, and delivery in the
  background with backoff (hosted_delivery.py);
- ``service_id``: a caller id under a service's id rules, deterministic and
  collision-free.

A backend file needs only this module: the names it uses from the others are
importable from here.

URL: ``<scheme>://[host[:port]][?outbox=PATH&insecure=1]``. The host defaults to
the service's; ``insecure=1`` speaks plain http (local fakes only); ``outbox`` is
the SQLite file (default ``memory-outbox.db`` in the data folder, ``places.data_dir``;
a relative path is relative to the project's root). The API key comes
from the service's environment variable (see .env.example). Units: seconds.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .errors import InvalidStoreUrlError, MemoryStoreError
from .facts import Fact, Remembered, matching_facts, reconcile
from .hosted_delivery import CLOSE_TIMEOUT, DELIVERY_TIMEOUT, Delivery
from .hosted_http import (
    Http,
    RateLimitedError,
    ServiceRejectedError,
    ServiceUnavailableError,
    path,
)
from .hosted_merge import merged, profile_of, recalled
from .limits import RECALL_EXCHANGES, WRITE_TIMEOUT
from .outbox_items import KINDS, Item, Row
from .outbox_ledger import Ledger
from .outbox_threads import OutboxThreads
from .places import data_dir, local_path, warn_of_earlier_file
from .records import Exchange, Recall, Summary
from .store import PURGEABLE

__all__ = [
    "CLOSE_TIMEOUT",
    "DELIVERY_TIMEOUT",
    "HostedStore",
    "Http",
    "Item",
    "RateLimitedError",
    "RemoteIds",
    "Service",
    "ServiceRejectedError",
    "ServiceUnavailableError",
    "open_hosted",
    "path",
    "service_id",
]

logger = logging.getLogger("memory.hosted")

MARK_READ_TIMEOUT = 0.4
"""Seconds ``erased_at`` waits for the service's mark of erasures; then the outbox's."""


# -- Caller ids ----------------------------------------------------------------------

_ESCAPES = {"_": "__", ".": "_d", "@": "_a", "+": "_p", ":": "_c"}


def service_id(
    caller_id: str, *, prefix: str, max_chars: int, colon: bool = True
) -> str:
    """``caller_id`` (validate_caller_id's ``[A-Za-z0-9_.:@+-]{1,128}``) as an id
    made of ``[A-Za-z0-9_:-]`` (``:`` only if ``colon``), ``prefix`` first, at most
    ``max_chars`` characters. Deterministic and collision-free: ``_ . @ + :`` become
    ``__ _d _a _p _c`` (``:`` kept when allowed), a reversible escape in which ``_``
    always starts a pair; an escaped id that would be too long becomes ``_h`` + 64 hex
    digits of its SHA-256, which no escaped id starts with."""
    escapes = {k: v for k, v in _ESCAPES.items() if not (colon and k == ":")}
    escaped = "".join(escapes.get(c, c) for c in caller_id)
    if len(prefix) + len(escaped) > max_chars:
        escaped = "_h" + hashlib.sha256(caller_id.encode()).hexdigest()
    return prefix + escaped


# -- A service, and the store over it ------------------------------------------------


class Service:
    """One hosted memory service's HTTP calls; a backend file subclasses it.

    Class attributes say how to reach it; the coroutines are all HostedStore needs.
    Every call goes through ``self.http`` (timeouts, rate limits, error mapping).
    ``put`` must be idempotent: sending the same item twice leaves one copy."""

    name = ""  # "Supermemory"
    scheme = ""  # URL scheme, e.g. "supermemory"
    default_host = ""  # e.g. "api.supermemory.ai"
    base_path = ""  # e.g. "/api/v4"
    key_env = ""  # environment variable with the API key
    auth_scheme = ""  # Authorization: <auth_scheme> <key>
    lists_items = True  # False: ``listing`` returns None (reads come from the outbox)
    # How delivery (hosted_delivery) treats it: rows per round, one ``put`` each (a
    # service may refuse one item and take the others), the backoff kept at close.
    claim = 16
    batched = False
    retries_at_close = False

    def __init__(self, http: Http, ids: RemoteIds) -> None:
        self.http = http
        self.ids = (
            ids  # the service's ids of callers, calls (e.g. Zep user and thread uuids)
        )

    async def put(self, item: Item, attempts: int) -> dict[str, Any]:
        """Store ``item`` (a new version replaces the old); returns its ``remote`` ids.
        ``attempts``: earlier tries that failed, maybe after the service acted."""
        raise NotImplementedError

    async def put_all(self, items: list[Item]) -> None:
        """Only for a ``batched`` target (spool_target.StoreTarget); a service puts each."""
        raise NotImplementedError

    async def search(self, caller_id: str, query: str, limit: int) -> list[Item]:
        """The caller's items that best match ``query``, best first."""
        raise NotImplementedError

    async def listing(
        self, caller_id: str, kinds: tuple[str, ...]
    ) -> list[Item] | None:
        """Every item of the caller of these ``kinds`` the service holds (rebuilt from
        its metadata), or None when the service has no way to list them."""
        raise NotImplementedError

    async def delete(
        self, caller_id: str, items: list[tuple[str, dict[str, Any]]]
    ) -> None:
        """Delete these items (id, remote); one already gone is not an error."""
        raise NotImplementedError

    async def delete_caller(self, caller_id: str) -> None:
        """Delete everything of the caller at the service."""
        raise NotImplementedError

    async def mark_erased(self, caller_id: str, before: float) -> None:
        """Record at the service that everything of the caller from before ``before``
        (seconds since the epoch) was erased, for workers with outboxes of their
        own (``erased_at``); called once ``delete_caller`` is done. A service with
        no place for such a mark does nothing (its docstring says so)."""

    async def erased_at(self, caller_id: str) -> float:
        """The latest ``mark_erased`` time of the caller at the service (0.0: none)."""
        return 0.0


class RemoteIds:
    """The service's ids a Service keeps in the outbox file (e.g. a Zep user uuid)."""

    def __init__(self, io: OutboxThreads, ledger: Ledger) -> None:
        self._io, self._ledger = io, ledger

    async def get(self, caller_id: str, name: str) -> str | None:
        return await self._io.write(self._ledger.remote_id, caller_id, name)

    async def set(self, caller_id: str, name: str, value: str) -> None:
        await self._io.write(self._ledger.set_remote_id, caller_id, name, value)


def open_hosted(url: str, service: type[Service]) -> HostedStore:
    """Open the store a hosted service's URL names (see this module's docstring).
    Synchronous, no network: call it once per process (prewarm). Raises
    ``InvalidStoreUrlError`` for a malformed URL or a missing key, and
    ``StoreUnavailableError`` for an outbox file that cannot be used."""
    parts = urlsplit(url)
    example = f"{service.scheme}://{service.default_host}"
    if parts.scheme != service.scheme or parts.path not in ("", "/") or parts.fragment:
        raise InvalidStoreUrlError(
            f"{url!r} is not a {service.name} URL such as {example}"
        )
    if "@" in parts.netloc:
        raise InvalidStoreUrlError(
            f"put the {service.name} key in {service.key_env}, not in the URL"
        )
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - {"outbox", "insecure"})
    if unknown:
        raise InvalidStoreUrlError(
            f"{url!r}: unknown option(s) {', '.join(unknown)} (outbox, insecure)"
        )
    key = os.getenv(service.key_env, "").strip()
    if not key:
        raise InvalidStoreUrlError(
            f"{service.key_env} is not set: the {service.name} API key"
        )
    http_scheme = "http" if query.get("insecure", [""])[-1] == "1" else "https"
    base_url = (
        f"{http_scheme}://{parts.netloc or service.default_host}{service.base_path}"
    )
    given = query.get("outbox", [""])[-1]
    outbox = local_path(given) if given else data_dir() / "memory-outbox.db"
    if not given:
        warn_of_earlier_file(outbox)
    http = Http(
        service.name, base_url, {"Authorization": f"{service.auth_scheme} {key}"}
    )
    return HostedStore(service, http, outbox)


class HostedStore:
    """MemoryStore over a hosted service, with the outbox in between.

    Writes (``save``, ``remember``, ``save_summary``) are durable in the outbox when
    they return, and delivered in the background. Reads merge the outbox with the
    service: ``recall`` takes the caller's freshest exchanges from the outbox (the
    service's search lags) and then the service's own ranking; ``profile``,
    ``exchanges`` and ``summaries`` merge the service's listing (other workers'
    writes) with the outbox's rows. ``forget`` hides the items at once and queues
    the service's delete; ``callers``, ``stats`` and ``purge`` cover what this
    worker's outbox holds (the services offer no way to list every caller).
    Reads that need the service raise ``ServiceUnavailableError`` when it fails (memory
    then says memory could not be read, not that nothing is known).
    """

    def __init__(self, service: type[Service], http: Http, outbox: Path) -> None:
        self.http = http
        # one thread writes the outbox (SQLite has one writer at a time anyway); reads
        # have threads of their own, so a recall never waits behind a delivery's write
        self._io = OutboxThreads(outbox)
        self._outbox = self._io.outbox
        ledger = Ledger(self._outbox)
        self.service = service(http, RemoteIds(self._io, ledger))
        self._delivery = Delivery(self.service, http, self._io, ledger)

    @property
    def outbox_path(self) -> Path:
        return self._outbox.path

    # -- writes --

    async def save(self, exchange: Exchange) -> None:
        # the spool's group commit (outbox_threads.OutboxThreads.put): saves of many
        # calls at once share one transaction and one fsync
        await self._io.put([Item.of_exchange(exchange)])
        self._delivery.kick()

    async def save_many(self, exchanges: list[Exchange]) -> None:
        """``save`` for several exchanges at once (one put; ExchangeWriter's backlog)."""
        await self._io.put([Item.of_exchange(e) for e in exchanges])
        self._delivery.kick()

    async def erased_at(self, caller_id: str) -> float:
        """The later of this outbox's tombstones (what the worker processes sharing
        this outbox file forgot, kept ``KEEP_TOMBSTONES``) and the service's mark
        (``Service.mark_erased``: what a worker with another outbox forgot). A mark
        newer than the outbox knew is recorded in it: its rows from before then are
        dropped, and deleted at the service if they may be there. When the service
        cannot be read, the outbox's time alone (logged once)."""
        marks = await self._io.read(self._outbox.tombstones, caller_id)
        local = float(marks.before)
        try:  # bounded: the outbox's own time is not lost behind a slow service
            remote = await asyncio.wait_for(
                self.service.erased_at(caller_id), MARK_READ_TIMEOUT
            )
        except (MemoryStoreError, TimeoutError) as exc:
            self._delivery.warn_once(
                "erased-mark",
                "could not read %s's mark of erasures: %r",
                self.service.name,
                exc,
            )
            return local
        if remote > local:
            await self._io.write(self._outbox.learn_erasure, caller_id, remote)
            self._delivery.kick()
        return max(local, remote)

    async def remember(
        self, caller_id: str, fact: Fact, *, timeout: float = WRITE_TIMEOUT
    ) -> Remembered:
        deadline = time.monotonic() + timeout
        facts = await self._facts(caller_id, timeout / 2)
        held = [f.fact() for f in facts if f.data["kind"] == fact.kind]
        change = reconcile([f for f in held if f.replaced_at is None], fact)
        items = [
            *(
                Item.of_fact(caller_id, replace(f, replaced_at=fact.updated_at))
                for f in change.retire
            ),
            *(
                Item.of_fact(caller_id, f)
                for f in (change.confirm, change.add)
                if f is not None
            ),
        ]
        # one transaction: the history and the new value land together or not at all
        await self._io.write(self._outbox.put_all, items, deadline)
        self._delivery.kick()
        return change.remembered

    async def save_summary(self, caller_id: str, call_id: str, text: str) -> None:
        await self._io.write(
            self._outbox.put,
            Item.of_summary(caller_id, Summary(call_id, text, time.time())),
        )
        # The summary is a call's last write (CallMemory.aclose, in the job's shutdown):
        # deliver what waits now, while the job process surely lives. CallMemory bounds
        # this wait; what it cuts off stays in the outbox for the next process.
        await self.flush(CLOSE_TIMEOUT)

    async def forget(
        self,
        caller_id: str,
        *,
        kind: str | None = None,
        value: str | None = None,
        call_id: str | None = None,
        timeout: float = WRITE_TIMEOUT,
    ) -> int:
        deadline = time.monotonic() + timeout
        scope: dict[str, Any] = {"call": call_id} if call_id is not None else {}
        if kind is not None:
            # every value of the kind (history too) the outbox or the service holds
            facts = await self._facts(caller_id, timeout / 2)
            gone = matching_facts([i.fact() for i in facts], kind, value)
            ids = {i.id for i in facts if i.fact() in gone}
            if value is None:  # and the kind's current item, wherever it is
                ids.add(Item.of_fact(caller_id, Fact(kind, "-")).id)
            scope = {"items": sorted(ids)}
        # What the service holds in scope (other workers' writes), to delete and count;
        # without an answer in time, the outbox's own rows are forgotten and counted.
        try:
            kinds = ("fact",) if kind else ("exchange", "summary") if call_id else KINDS
            listed = await asyncio.wait_for(
                self._service_view(caller_id, kinds), timeout / 2
            )
        except (MemoryStoreError, TimeoutError) as exc:
            self._delivery.warn_once(
                "forget-list",
                "could not list the caller at %s before forgetting: %r",
                self.service.name,
                exc,
            )
            listed = []
        also = [
            i
            for i in listed
            if ("items" in scope and i.id in scope["items"])
            or ("call" in scope and i.kind != "fact" and i.call_id == scope["call"])
            or not scope
        ]
        n = await self._io.write(self._outbox.forget, caller_id, scope, also, deadline)
        self._delivery.kick()
        return n

    async def purge(self, *, before: float, what: str) -> int:
        if what not in PURGEABLE:
            raise ValueError(
                f"what must be one of {', '.join(PURGEABLE)}, not {what!r}"
            )
        n = await self._io.write(self._outbox.purge, what, before)
        self._delivery.kick()
        return n

    # -- reads --

    async def _facts(self, caller_id: str, timeout: float) -> list[Item]:
        """The caller's fact items (current and history) from the outbox and, if it
        answers within ``timeout`` seconds, the service; else the outbox's alone."""
        try:
            items, _, _ = await asyncio.wait_for(
                self._view(caller_id, ("fact",)), timeout
            )
            return [i for i in items.values() if i.kind == "fact"]
        except (MemoryStoreError, TimeoutError) as exc:
            self._delivery.warn_once(
                "facts-list",
                "could not list the caller's facts at %s: %r",
                self.service.name,
                exc,
            )
        rows, _ = await self._io.read(self._outbox.rows, caller_id, ("fact",))
        return [r.item for r in rows if r.item.kind == "fact"]

    async def history(self, caller_id: str) -> list[Fact]:
        items, _, _ = await self._view(caller_id, ("fact",))
        old = [i.fact() for i in items.values() if i.kind == "fact"]
        return sorted(
            (f for f in old if f.replaced_at is not None),
            key=lambda f: -(f.replaced_at or 0.0),
        )

    async def _service_view(self, caller_id: str, kinds: tuple[str, ...]) -> list[Item]:
        """The service's listing of the caller, less what was forgotten."""
        listed = await self.service.listing(caller_id, kinds) or []
        marks = await self._io.read(self._outbox.tombstones, caller_id)
        return [i for i in listed if not marks.hides(i)]

    async def _view(
        self, caller_id: str, kinds: tuple[str, ...], query: str = "", limit: int = 0
    ) -> tuple[dict[str, Item], list[Row], list[Item]]:
        """(the caller's items of ``kinds`` by id, the outbox's rows, search hits for
        ``query``), asked of the outbox and the service in parallel."""
        self._delivery.kick()
        searching = bool(limit and query.strip())
        (rows, marks), listed, found = await asyncio.gather(
            self._io.read(self._outbox.rows, caller_id, kinds, searching),
            self.service.listing(caller_id, kinds),
            self.service.search(caller_id, query, limit + 4)
            if searching
            else _nothing(),
        )
        items = merged(listed, rows, marks, kinds)
        return items, rows, [i for i in found if not marks.hides(i)]

    async def profile(self, caller_id: str) -> Recall:
        items, _, _ = await self._view(caller_id, ("fact", "summary"))
        return profile_of(items)

    async def recall(
        self,
        caller_id: str,
        query: str,
        *,
        limit: int = RECALL_EXCHANGES,
        exclude_call_id: str | None = None,
    ) -> Recall:
        items, rows, found = await self._view(
            caller_id, ("fact", "summary"), query, limit
        )
        return recalled(items, rows, found, query, limit, exclude_call_id)

    async def exchanges(
        self, caller_id: str, *, call_id: str | None = None
    ) -> list[Exchange]:
        items, _, _ = await self._view(caller_id, ("exchange",))
        found = [
            i.exchange()
            for i in items.values()
            if i.kind == "exchange" and call_id in (None, i.call_id)
        ]
        return sorted(found, key=lambda e: (e.created_at, e.key))

    async def summaries(self, caller_id: str) -> list[Summary]:
        items, _, _ = await self._view(caller_id, ("summary",))
        found = [i.summary() for i in items.values() if i.kind == "summary"]
        return sorted(found, key=lambda s: s.created_at, reverse=True)

    async def callers(self, *, after: str = "", limit: int = 100) -> list[str]:
        return await self._io.read(self._outbox.callers, after, limit)

    async def stats(self) -> dict[str, int]:
        return await self._io.read(self._outbox.stats)

    async def flush(self, timeout: float = CLOSE_TIMEOUT) -> int:
        """``Delivery.flush``: how many writes are left undelivered after trying for
        ``timeout`` seconds."""
        return await self._delivery.flush(timeout)

    async def close(self) -> None:
        if self._io.closed:
            return
        try:
            left = await self.flush(CLOSE_TIMEOUT)
            if left:
                logger.warning(
                    "memory: %d write(s) still undelivered to %s at close; they stay in %s "
                    "for the next process",
                    left,
                    self.service.name,
                    self._outbox.path,
                )
        finally:
            await self._delivery.stop()
            self._io.closed = True
            await self.http.aclose()
            await self._io.close()


async def _nothing() -> list[Item]:
    return []
