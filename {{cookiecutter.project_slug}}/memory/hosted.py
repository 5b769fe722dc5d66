"""What the hosted memory backends share (supermemory_store.py, mem0_store.py, zep_store.py).

Each of those files is a small ``Service``: the service's own HTTP calls. This file
turns a Service into a ``MemoryStore``, with the outbox (outbox.py) in between:
every write goes first to a local SQLite file on the worker, then to the service in
the background, so an outage or a worker killed mid-call loses nothing.

- ``Http``: one ``httpx2.AsyncClient`` per process, made in ``open_store`` (LiveKit's
  prewarm) and bound to the job's event loop on first use, a timeout
  on every call, 429 + ``Retry-After`` / ``X-RateLimit-*`` honoured, errors mapped to
  memory's error family. httpx2 is httpx under its maintained name (same API);
  livekit-agents 1.8.9 already depends on it.
- ``HostedStore``: MemoryStore over a Service and an Outbox: delivery in the
  background with backoff, reads that merge the outbox with the service, forgetting.
- ``service_id``: a caller id under a service's id rules, deterministic and
  collision-free.

URL: ``<scheme>://[host[:port]][?outbox=PATH&insecure=1]``. The host defaults to
the service's; ``insecure=1`` speaks plain http (local fakes only); ``outbox`` is
the SQLite file (default ``memory-outbox.db`` in the data folder, ``places.data_dir``;
a relative path is relative to the project's root). The API key comes
from the service's environment variable (see .env.example). Units: seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import hashlib
import importlib
import logging
import os
import re
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import httpx2

from .errors import (
    FAIL_OPEN,
    InvalidStoreUrlError,
    MemoryStoreError,
    StoreUnavailableError,
)
from .facts import Fact, Remembered, matching_facts, reconcile
from .limits import RECALL_EXCHANGES, RECENT_SUMMARIES, WRITE_TIMEOUT
from .outbox import KINDS, LAG_WINDOW, MAX_PENDING, Item, Outbox, Row
from .places import data_dir, local_path
from .records import Exchange, Recall, Summary
from .store import PURGEABLE

logger = logging.getLogger("memory.hosted")

CONNECT_TIMEOUT = 2.0
"""Seconds to open a connection to the service."""
READ_TIMEOUT = 2.0
"""Seconds one read (recall, profile, export) may take; a recall is also cut by
RECALL_BUDGET, this only bounds the request behind it."""
DELIVERY_TIMEOUT = 10.0
"""Seconds one background delivery may take (the caller never waits for it)."""
CLOSE_TIMEOUT = 2.0
"""Seconds ``close`` spends delivering what is left; the rest waits in the outbox."""
BACKOFF = (0.5, 2.0, 5.0, 15.0, 60.0)
"""Seconds before the 1st, 2nd, ... retry of a failed delivery (then every 60 s)."""
BACKLOG_WARNING = 100
"""Undelivered rows (or as many seconds for the oldest) past which the log says, once,
that the outbox is backing up."""


# -- Errors --------------------------------------------------------------------------


class ServiceUnavailableError(StoreUnavailableError):
    """The service did not answer in time, could not be reached, answered 5xx, or
    refused the key or the plan (401, 402, 403): worth retrying later."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RateLimitedError(ServiceUnavailableError):
    """429: ``retry_after`` seconds to wait (from Retry-After, else a backoff)."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message, 429)
        self.retry_after = retry_after


class ServiceRejectedError(MemoryStoreError, ValueError):
    """The service refused the request itself (400, 404, 409, 413, 422): retrying the
    same request cannot help. The item stays in the outbox, marked rejected."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


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


# -- HTTP ----------------------------------------------------------------------------


class Http:
    """One ``httpx2.AsyncClient`` per process: made when the store opens (in prewarm:
    making one loads the TLS certificates, ~0.2 s, which must not fall inside a
    caller's first recall), bound to the first event loop that uses it (the job's),
    and made anew if another loop comes (its connections belong to the old one).
    ``call`` makes one request; it never retries (the outbox does, and a recall has
    no time to). While the service has asked us to wait (429 with ``Retry-After``,
    or ``X-RateLimit-Remaining: 0`` until ``X-RateLimit-Reset``), calls fail at once
    with ``RateLimitedError`` instead of adding to the load."""

    def __init__(self, name: str, base_url: str, headers: dict[str, str]) -> None:
        self.name, self.base_url, self.headers = name, base_url, headers
        # httpx2 loads its network backend (anyio's) on the first request: ~50 ms, far
        # more on a busy machine, inside a caller's first recall. Load it here instead.
        with contextlib.suppress(ImportError):
            importlib.import_module("anyio._backends._asyncio")
        self._client: httpx2.AsyncClient | None = self._new_client()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.paused_until = 0.0  # time.monotonic() before which we do not call
        self.requests = 0

    def _new_client(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            base_url=self.base_url,
            headers=self.headers,
            timeout=httpx2.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT),
            limits=httpx2.Limits(max_connections=16, max_keepalive_connections=8),
        )

    def client(self) -> httpx2.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop not in (None, loop):
            self._client = self._new_client()
        self._loop = loop
        return self._client

    async def call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
        ok: tuple[int, ...] = (200, 201, 202),
    ) -> Any:
        """The decoded JSON body of a 2xx answer (or of a status in ``ok``; None when
        empty), within ``timeout`` seconds (default READ_TIMEOUT). Raises
        RateLimitedError, ServiceUnavailableError or ServiceRejectedError."""
        timeout = READ_TIMEOUT if timeout is None else timeout
        wait = self.paused_until - time.monotonic()
        if wait > 0:
            raise RateLimitedError(f"{self.name} asked to wait {wait:.1f} s more", wait)
        what = f"{method} {path.split('?')[0]}"
        self.requests += 1
        try:
            answer = await self.client().request(
                method, path, json=json, params=params, headers=headers, timeout=timeout
            )
        except httpx2.TimeoutException:
            raise ServiceUnavailableError(
                f"{self.name}: no answer within {timeout} s ({what})"
            ) from None
        except httpx2.TransportError as exc:
            raise ServiceUnavailableError(
                f"{self.name} unreachable ({what}): {exc!r}"
            ) from None
        self._note_limits(answer)
        status = answer.status_code
        if 200 <= status < 300 or status in ok:
            try:
                return answer.json() if answer.content else None
            except ValueError:
                raise ServiceUnavailableError(
                    f"{self.name}: not JSON ({what})", status
                ) from None
        message = f"{self.name} answered {status} to {what}: {error_text(answer)}"
        if status == 429:
            retry = retry_after(answer) or BACKOFF[1]
            self.paused_until = max(self.paused_until, time.monotonic() + retry)
            raise RateLimitedError(message, retry)
        if status >= 500 or status in (401, 402, 403, 408):
            raise ServiceUnavailableError(message, status)
        raise ServiceRejectedError(message, status)

    def _note_limits(self, answer: httpx2.Response) -> None:
        # Zep sends these on every answer [ZEP-DOCS rate-limits]; Mem0's SDK reads
        # them on 429 [M0-SDK2]. Reset is Unix seconds (small values: seconds from now).
        if answer.headers.get("x-ratelimit-remaining") == "0":
            try:
                reset = float(answer.headers.get("x-ratelimit-reset", ""))
            except ValueError:
                return
            wait = reset - time.time() if reset > 1e9 else reset
            if 0 < wait <= 120:
                self.paused_until = max(self.paused_until, time.monotonic() + wait)

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._loop in (None, asyncio.get_running_loop()):
            await client.aclose()


def retry_after(answer: httpx2.Response) -> float | None:
    """Seconds from ``retry-after-ms``, or ``Retry-After`` (seconds or an HTTP date),
    at most 300; None when absent."""
    h = answer.headers
    try:
        if "retry-after-ms" in h:
            return min(300.0, float(h["retry-after-ms"]) / 1000)
        if "retry-after" in h:
            value = h["retry-after"]
            if re.fullmatch(r"\d+(\.\d+)?", value.strip()):
                return min(300.0, float(value))
            when = email.utils.parsedate_to_datetime(value).timestamp()
            return min(300.0, max(0.0, when - time.time()))
    except (TypeError, ValueError):
        return None
    return None


def error_text(answer: httpx2.Response) -> str:
    """The message in an error body, whichever shape the service uses: Supermemory
    ``{"error", "details"}``, Mem0 ``{"error"|"detail"|"message", "details"?:
    {"message"}}``, Zep v3 ``{"message"}``, Zep v4 ``{"error": {"message", ...}}``
    (each service's API reference)."""
    try:
        body = answer.json()
    except ValueError:
        return answer.text[:200] or "(no body)"
    if not isinstance(body, dict):
        return str(body)[:300]
    said = []
    for key in ("error", "detail", "message", "details"):
        value = body.get(key)
        if isinstance(value, dict):
            value = value.get("message") or value
        if value:
            said.append(str(value))
    return ": ".join(said)[:300] or str(body)[:300]


def path(*parts: str) -> str:
    """A URL path from parts, each percent-encoded (caller ids hold '@', '+', ':')."""
    return "/" + "/".join(quote(str(p), safe="") for p in parts)


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

    def __init__(self, http: Http, ids: RemoteIds) -> None:
        self.http = http
        self.ids = (
            ids  # the service's ids of callers, calls (e.g. Zep user and thread uuids)
        )

    async def put(self, item: Item, attempts: int) -> dict[str, Any]:
        """Store ``item`` (a new version replaces the old); returns its ``remote`` ids.
        ``attempts``: earlier tries that failed, maybe after the service acted."""
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


class RemoteIds:
    """The service's ids a Service keeps in the outbox file (e.g. a Zep user uuid)."""

    def __init__(self, store: HostedStore) -> None:
        self._store = store

    async def get(self, caller_id: str, name: str) -> str | None:
        return await self._store._db(self._store._outbox.remote_id, caller_id, name)

    async def set(self, caller_id: str, name: str, value: str) -> None:
        await self._store._db(self._store._outbox.set_remote_id, caller_id, name, value)


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
        self.service = service(http, RemoteIds(self))
        # one thread writes the outbox (SQLite has one writer at a time anyway); reads
        # have threads of their own, so a recall never waits behind a delivery's write
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="memory-outbox")
        self._readers = ThreadPoolExecutor(2, thread_name_prefix="memory-outbox-read")
        try:
            self._outbox: Outbox = self._executor.submit(Outbox, outbox).result()
        except (sqlite3.Error, OSError) as exc:
            self._executor.shutdown()
            self._readers.shutdown()
            raise StoreUnavailableError(
                f"cannot use {outbox} as the memory outbox: {exc}"
            ) from exc
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._round: asyncio.Lock | None = None
        self._round_loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._warned: set[str] = set()
        self._last_error: BaseException | None = None

    @property
    def outbox_path(self) -> Path:
        return self._outbox.path

    async def _read(self, fn: Any, *args: Any) -> Any:
        """Run an outbox read on a reader thread (never behind a write)."""
        if self._closed:
            raise StoreUnavailableError("the memory store is closed")
        return await asyncio.get_running_loop().run_in_executor(
            self._readers, fn, *args
        )

    async def _db(self, fn: Any, *args: Any) -> Any:
        if self._closed:
            raise StoreUnavailableError("the memory store is closed")
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, fn, *args
        )

    # -- writes --

    async def save(self, exchange: Exchange) -> None:
        await self._db(self._outbox.put, Item.of_exchange(exchange))
        self._kick()

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
        await self._db(self._outbox.put_all, items, deadline)
        self._kick()
        return change.remembered

    async def save_summary(self, caller_id: str, call_id: str, text: str) -> None:
        await self._db(
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
            self._warn_once(
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
        n = await self._db(self._outbox.forget, caller_id, scope, also, deadline)
        self._kick()
        return n

    async def purge(self, *, before: float, what: str) -> int:
        if what not in PURGEABLE:
            raise ValueError(
                f"what must be one of {', '.join(PURGEABLE)}, not {what!r}"
            )
        n = await self._db(self._outbox.purge, what, before)
        self._kick()
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
            self._warn_once(
                "facts-list",
                "could not list the caller's facts at %s: %r",
                self.service.name,
                exc,
            )
        rows, _ = await self._read(self._outbox.rows, caller_id, ("fact",))
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
        _, marks = await self._read(self._outbox.rows, caller_id, ())
        return [i for i in listed if not marks.hides(i)]

    async def _view(
        self, caller_id: str, kinds: tuple[str, ...], query: str = "", limit: int = 0
    ) -> tuple[dict[str, Item], list[Row], list[Item]]:
        """(the caller's items of ``kinds`` by id, the outbox's rows, search hits for
        ``query``), asked of the outbox and the service in parallel."""
        self._kick()
        searching = bool(limit and query.strip())
        (rows, marks), listed, found = await asyncio.gather(
            self._read(self._outbox.rows, caller_id, kinds, searching),
            self.service.listing(caller_id, kinds),
            self.service.search(caller_id, query, limit + 4)
            if searching
            else _nothing(),
        )
        # a service may hold two copies of an item (two workers wrote it): the newest wins
        ordered = sorted(listed or [], key=lambda i: i.at)
        items = {i.id: i for i in ordered if not marks.hides(i)}
        # the outbox's copy is the newest
        items.update({r.item.id: r.item for r in rows if r.item.kind in kinds})
        return items, rows, [i for i in found if not marks.hides(i)]

    async def profile(self, caller_id: str) -> Recall:
        items, _, _ = await self._view(caller_id, ("fact", "summary"))
        return _profile(items)

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
        now = time.time()
        # Write lag: what the service may not have indexed yet comes from the outbox.
        fresh = [
            r.item
            for r in rows
            if r.item.kind == "exchange"
            and (r.pending or (r.delivered_at or 0) > now - LAG_WINDOW)
        ]
        ranked = [
            *rank(fresh, query_words(query)),
            *(i for i in found if i.kind == "exchange"),
        ]
        exchanges: dict[str, Exchange] = {}
        outbox = {r.item.id: r.item for r in rows}
        said: set[tuple[str, str]] = (
            set()
        )  # the same words twice (a fixed greeting) once
        for hit in ranked:
            item = outbox.get(hit.id, hit)
            if item.call_id != exclude_call_id and hit.id not in exchanges:
                e = item.exchange()
                if (e.user_text, e.assistant_text) not in said:
                    said.add((e.user_text, e.assistant_text))
                    exchanges[hit.id] = e
        profile = _profile(items)
        # Facts a service derived itself (Zep's graph) follow the caller's own facts.
        kinds = {f.kind for f in profile.facts}
        derived = [
            f
            for f in (i.fact() for i in found if i.kind == "fact")
            if f.kind not in kinds and f.replaced_at is None
        ]
        return Recall(
            (*profile.facts, *derived),
            profile.summaries,
            tuple(exchanges.values())[:limit],
        )

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
        return await self._read(self._outbox.callers, after, limit)

    async def stats(self) -> dict[str, int]:
        return await self._read(self._outbox.stats)

    # -- delivery --

    def _kick(self) -> None:
        """Start the delivery loop in the running event loop (the job's), or wake it."""
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._deliver_forever(), name="memory-outbox")
        assert self._wake is not None
        self._wake.set()

    async def _deliver_forever(self) -> None:
        while not self._closed:
            try:
                if await self.deliver_once():
                    continue
                count, oldest, due = await self._read(self._outbox.backlog)
            except StoreUnavailableError:
                return  # closed
            except FAIL_OPEN as exc:  # the outbox file itself: try again shortly
                self._warn_once("outbox", "memory outbox error: %r", exc)
                count, oldest, due = 0, None, 5.0
            self._report_backlog(count, oldest)
            wait = min(60.0, due if due is not None else 60.0)
            wait = max(wait, self.http.paused_until - time.monotonic(), 0.01)
            assert self._wake is not None
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)

    async def deliver_once(self) -> bool:
        """Deliver what is due now (deletes first); returns False when nothing was.
        One round at a time per process, so ``flush`` waits for the background
        loop's round instead of finding its rows leased."""
        loop = asyncio.get_running_loop()
        if self._round is None or self._round_loop is not loop:  # a lock is one loop's
            self._round, self._round_loop = asyncio.Lock(), loop
        async with self._round:
            deletes, rows = await self._db(self._outbox.claim, 16)
            for d in deletes:
                await self._delete(d)
            await asyncio.gather(*(self._put(r) for r in rows))
        return bool(deletes or rows)

    async def _put(self, row: Row) -> None:
        try:
            remote = await asyncio.wait_for(
                self.service.put(row.item, row.attempts), DELIVERY_TIMEOUT
            )
        except FAIL_OPEN as exc:
            retry = self._retry_in(exc, row.attempts)
            if retry is None:
                # The service's answer may quote what it was sent (the caller's words):
                # only its status above DEBUG.
                why = type(exc).__name__
                if isinstance(exc, ServiceRejectedError):
                    why = f"status {exc.status}"
                logger.error(
                    "memory: %s rejected %s %s of caller %s (%s); it stays in %s",
                    self.service.name,
                    row.item.kind,
                    row.item.id,
                    row.item.caller_id,
                    why,
                    self._outbox.path,
                )
                logger.debug("memory: %s's answer: %s", self.service.name, exc)
            await self._db(
                self._outbox.failed,
                "items",
                (row.item.caller_id, row.item.id),
                exc,
                retry,
            )
        else:
            await self._db(self._outbox.delivered, row, remote)

    async def _delete(self, d: dict[str, Any]) -> None:
        try:
            if d["everything"]:
                await asyncio.wait_for(
                    self.service.delete_caller(d["caller_id"]), DELIVERY_TIMEOUT
                )
            else:
                items = [(i, r) for i, r in d["items"]]
                await asyncio.wait_for(
                    self.service.delete(d["caller_id"], items), DELIVERY_TIMEOUT
                )
        except FAIL_OPEN as exc:
            # a refused delete is retried hourly: forgetting must not be dropped
            retry = self._retry_in(exc, d["attempts"]) or 3600.0
            await self._db(self._outbox.failed, "deletes", (d["seq"],), exc, retry)
        else:
            await self._db(self._outbox.deleted, d["seq"])

    def _retry_in(self, exc: BaseException, attempts: int) -> float | None:
        self._last_error = exc
        if isinstance(exc, ServiceRejectedError):
            return None
        if isinstance(exc, RateLimitedError):
            return exc.retry_after
        if not isinstance(exc, (ServiceUnavailableError, TimeoutError)):
            self._warn_once("deliver", "memory delivery failed unexpectedly: %r", exc)
        return BACKOFF[min(attempts, len(BACKOFF) - 1)]

    def _report_backlog(self, count: int, oldest: float | None) -> None:
        # Once when the outbox backs up, once when it has drained: never every turn.
        backed_up = count >= BACKLOG_WARNING or (oldest or 0) >= BACKLOG_WARNING
        if backed_up and "backlog" not in self._warned:
            self._warned.add("backlog")
            logger.warning(
                "memory outbox is backing up: %d write(s) not yet delivered to %s, the oldest "
                "waiting %.0f s (last error: %r); they are safe in %s and will be delivered "
                "when %s answers (at most %d are kept)",
                count,
                self.service.name,
                oldest or 0,
                self._last_error,
                self._outbox.path,
                self.service.name,
                MAX_PENDING,
            )
        elif count == 0 and "backlog" in self._warned:
            self._warned.discard("backlog")
            logger.info(
                "memory outbox drained: every write was delivered to %s",
                self.service.name,
            )

    def _warn_once(self, kind: str, message: str, *args: Any) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            logger.warning(message, *args)

    async def flush(self, timeout: float = CLOSE_TIMEOUT) -> int:
        """Deliver what is waiting, for at most ``timeout`` seconds; returns how many
        writes are still undelivered (they stay in the outbox)."""
        await self._db(self._outbox.due_now)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if not await asyncio.wait_for(
                    self.deliver_once(), deadline - time.monotonic()
                ):
                    break
            except TimeoutError:
                break
        count, oldest, _ = await self._read(self._outbox.backlog)
        self._report_backlog(count, oldest)
        return count

    async def close(self) -> None:
        if self._closed:
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
            self._closed = True
            if (
                self._task is not None
                and self._task.get_loop() is asyncio.get_running_loop()
            ):
                self._task.cancel()
            await self.http.aclose()
            loop = asyncio.get_running_loop()
            for executor in (self._readers, self._executor):
                await loop.run_in_executor(None, executor.shutdown, True)
            self._outbox.close()


async def _nothing() -> list[Item]:
    return []


def _profile(items: dict[str, Item]) -> Recall:
    facts = sorted(
        (
            f
            for f in (i.fact() for i in items.values() if i.kind == "fact")
            if f.replaced_at is None
        ),
        key=lambda f: -f.updated_at,
    )
    summaries = sorted(
        (i.summary() for i in items.values() if i.kind == "summary"),
        key=lambda s: -s.created_at,
    )
    return Recall(tuple(facts), tuple(summaries[:RECENT_SUMMARIES]))


_WORD = re.compile(r"\w+")


def query_words(text: str) -> set[str]:
    """Content words of what the caller said: 4+ letters or a number, lower-case, as
    plain words (never search syntax)."""
    return {w for w in _WORD.findall(text.lower()) if len(w) > 3 or w.isdigit()}


def rank(items: list[Item], words: set[str]) -> list[Item]:
    """Exchanges that share words with the query, most shared first, then newest."""
    scored = []
    for item in items:
        said = set(_WORD.findall(Item.text(item).lower()))
        if shared := len(words & said):
            scored.append((-shared, -item.at, item))
    return [item for *_, item in sorted(scored, key=lambda s: s[:2])]
