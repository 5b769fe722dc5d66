"""What the fakes of the hosted services share: an aiohttp server on 127.0.0.1, run in
a thread of its own so that the test, and child processes the test starts (the real
entrypoint, a worker killed mid-call), all reach it over real HTTP.

A fake (tests/fake_<backend>.py) keeps the service's state in dicts and answers its
documented routes with the documented shapes, status codes and error bodies (each
fake's docstring names its sources). This base adds what every service does and
tests need to steer:

- the API key check (``auth_scheme``; 401 with the service's error body);
- write lag: ``lag`` seconds before a write is searchable (the services index
  asynchronously);
- rate limits: ``limit(n)`` answers 429 with ``Retry-After`` once ``n`` requests
  were made in the current window, with ``X-RateLimit-*`` headers on every answer
  (Zep's documented set [ZEP-DOCS rate-limits]);
- faults: ``fail(status, times)``, ``lose_answers(times)`` (the request is carried
  out, the answer is a 502: what a retry must not double), ``stall(seconds, times)``,
  ``complete_late(seconds, times)`` (the service's write ``write_route`` is carried out
  ``seconds`` later, after the client gave up on its answer: a retry may come first),
  ``down()`` / ``up()`` (connection refused);
- ``requests``: every request seen (method, path, JSON body, headers, time, status);
- ``item_ids()``: the kit's items the service holds, once per copy (doubles show).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from pathlib import Path
from typing import Any

from aiohttp import web

KEY = "offline-test-key"
STOPWORDS = frozenset(
    [
        "what",
        "which",
        "where",
        "when",
        "with",
        "that",
        "this",
        "your",
        "have",
        "from",
        "they",
    ]
)


def words(text: str) -> set[str]:
    """Content words, as the fakes' search sees them: 4+ letters or a number."""
    return {
        w
        for w in re.findall(r"\w+", text.lower())
        if (len(w) > 3 or w.isdigit()) and w not in STOPWORDS
    }


def similarity(query: str, text: str) -> float:
    """0-1: the share of the query's content words found in ``text`` (a stand-in for
    the services' semantic scores, which the fakes cannot reproduce)."""
    wanted = words(query)
    return len(wanted & words(text)) / len(wanted) if wanted else 0.0


async def json_body(request: web.Request) -> Any:
    """The request's JSON body (None without one); ``read`` keeps the bytes, so the
    middleware and the handler can both read it. Raises ValueError if not JSON."""
    raw = await request.read()
    if not raw:
        return None
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(str(exc)) from None


class FakeService:
    """Base of the fakes. Subclasses set ``scheme``, ``key_env``, ``auth_scheme`` and
    ``base_path``, and add routes in ``routes(app)``; handlers run on the fake's own
    event loop thread."""

    scheme = ""
    key_env = ""
    auth_scheme = ""
    base_path = ""
    write_route = ("POST", "")  # (method, path regex) of the service's item write

    def __init__(self, *, lag: float = 0.0) -> None:
        self.lag = lag
        self.requests: list[dict[str, Any]] = []
        self.port = 0
        # (status or ("stall" | "late", s), times left)
        self._faults: list[tuple[Any, int]] = []
        self._limit: int | None = None
        self._window = (0.0, 0)  # (window start, requests in it)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None

    # -- what tests steer --

    def url(self, outbox: Path) -> str:
        """MEMORY_URL of a store that talks to this fake, with its outbox file."""
        return f"{self.scheme}://127.0.0.1:{self.port}?insecure=1&outbox={outbox}"

    def fail(self, status: int, times: int = 1) -> None:
        """Answer the next ``times`` requests with ``status`` and the service's error body."""
        self._faults.append((status, times))

    def lose_answers(self, times: int = 1) -> None:
        """Carry out the next ``times`` requests but answer 502 (a proxy that lost the
        service's answer): the client cannot know the write happened."""
        self._faults.append((("lose", 0), times))

    def stall(self, seconds: float, times: int = 1) -> None:
        """Hold the next ``times`` requests ``seconds`` before answering."""
        self._faults.append((("stall", seconds), times))

    def complete_late(self, seconds: float, times: int = 1) -> None:
        """Carry out the next ``times`` item writes (``write_route``) ``seconds`` after
        they arrive, whether or not the client still waits for the answer (a service
        that completes a write after the client's timeout)."""
        self._faults.append((("late", seconds), times))

    def heal(self) -> None:
        """Drop the faults still to come."""
        self._faults.clear()

    def limit(self, per_window: int | None, window: float = 60.0) -> None:
        """Allow ``per_window`` requests per ``window`` seconds (None: no limit)."""
        self._limit, self._window_seconds = per_window, window
        self._window = (time.time(), 0)

    def visible_at(self) -> float:
        """When a write made now becomes searchable."""
        return time.time() + self.lag

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        """The service's error body; subclasses give their documented shape."""
        return {"error": message}

    def error(
        self, status: int, message: str, headers: dict[str, str] | None = None
    ) -> web.Response:
        return web.json_response(
            self.error_body(status, message), status=status, headers=headers
        )

    # -- serving --

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    def item_ids(self) -> list[str]:
        """The ids of the kit's items the service holds (Item.id, from their metadata),
        one entry per copy."""
        raise NotImplementedError

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware])
        self.routes(app)
        return app

    @web.middleware
    async def _middleware(
        self, request: web.Request, handler: Any
    ) -> web.StreamResponse:
        try:
            body = await json_body(request)
        except ValueError:
            return self.error(400, "body is not JSON")
        seen = {
            "method": request.method,
            "path": request.path,
            "query": dict(request.query),
            "json": body,
            "headers": dict(request.headers),
            "at": time.time(),
            "status": 0,
        }
        self.requests.append(seen)
        answer = await self._answer(request, handler)
        seen["status"] = answer.status
        return answer

    async def _answer(self, request: web.Request, handler: Any) -> web.StreamResponse:
        lose = False
        method, route = self.write_route
        writes = request.method == method and re.fullmatch(route, request.path)
        for n, (fault, times) in enumerate(self._faults):
            late = isinstance(fault, tuple) and fault[0] == "late"
            if times > 0 and (writes or not late):
                self._faults[n] = (fault, times - 1)
                if not isinstance(fault, tuple):
                    return self.error(fault, f"injected {fault}")
                if fault[0] == "lose":
                    lose = True
                elif late:  # shielded: the client giving up does not cancel it
                    return await asyncio.shield(
                        asyncio.ensure_future(self._late(fault[1], request, handler))
                    )
                else:
                    await asyncio.sleep(fault[1])
                break
        headers = self._count()
        if headers.get("Retry-After"):
            return self.error(429, "Too many requests", headers)
        if request.headers.get("Authorization") != f"{self.auth_scheme} {KEY}":
            return self.error(401, "invalid API key")
        answer = await handler(request)
        if lose:
            return web.Response(status=502, text="Bad Gateway")
        answer.headers.update(headers)
        return answer

    async def _late(
        self, seconds: float, request: web.Request, handler: Any
    ) -> web.StreamResponse:
        await asyncio.sleep(seconds)
        return await handler(request)

    def _count(self) -> dict[str, str]:
        if self._limit is None:
            return {}
        start, used = self._window
        now = time.time()
        if now - start >= self._window_seconds:
            start, used = now, 0
        used += 1
        self._window = (start, used)
        reset = start + self._window_seconds
        headers = {
            "X-RateLimit-Limit": str(self._limit),
            "X-RateLimit-Remaining": str(max(0, self._limit - used)),
            "X-RateLimit-Reset": str(int(reset) + 1),
            "X-RateLimit-Increment": "1",
        }
        if used > self._limit:
            headers["Retry-After"] = str(max(1, round(reset - now)))
        return headers

    def start(self) -> FakeService:
        started = threading.Event()

        def serve() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self._listen())
            started.set()
            self._loop.run_forever()

        self._thread = threading.Thread(
            target=serve, name=f"fake-{self.scheme}", daemon=True
        )
        self._thread.start()
        if not started.wait(10):
            raise RuntimeError("the fake service did not start")
        return self

    async def _listen(self) -> None:
        self._runner = web.AppRunner(self.app(), handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def _run(self, coro: Any) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def down(self) -> None:
        """Stop listening and drop open connections: new requests are refused."""
        if self._runner is not None:
            self._run(self._runner.cleanup())
            self._runner = None

    def up(self) -> None:
        """Listen again on the same port, with the same state."""
        if self._runner is None:
            self._run(self._listen())

    def stop(self) -> None:
        self.down()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(5)
