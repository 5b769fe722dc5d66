"""The HTTP side of the hosted memory backends: one ``httpx2.AsyncClient`` per
process, a timeout on every call, 429 + ``Retry-After`` / ``X-RateLimit-*``
honoured, and errors mapped to memory's error family (``ServiceUnavailableError``:
worth trying again later; ``ServiceRejectedError``: the request itself was refused).

httpx2 is httpx under its maintained name (same API); livekit-agents 1.8.9 already
depends on it. Units: seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import importlib
import re
import time
from typing import Any
from urllib.parse import quote

# httpx2 comes with livekit-agents from 1.8 (and is a dependency of projects on a
# hosted backend); elsewhere a type checker reads it as Any instead of failing.
import httpx2  # type: ignore[import-not-found, unused-ignore]

from .errors import (
    RateLimitedError,
    ServiceRejectedError,
    ServiceUnavailableError,
)

CONNECT_TIMEOUT = 2.0
"""Seconds to open a connection to the service."""
READ_TIMEOUT = 2.0
"""Seconds one read (recall, profile, export) may take; a recall is also cut by
RECALL_BUDGET, this only bounds the request behind it."""
RATE_LIMIT_WAIT = 2.0
"""Seconds every call waits after a 429 that says for how long in no header."""


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
            retry = retry_after(answer) or RATE_LIMIT_WAIT
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
