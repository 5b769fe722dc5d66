"""A fake of Zep Cloud's v4 API on localhost, for offline tests (sources: the
``zep-cloud`` 4.0.1 SDK; help.getzep.com/v4/sdk-reference and /rate-limits; github
getzep/zep).

What it follows: base path ``/api/v4``, ``Authorization: Api-Key``, server-assigned
UUIDs (users, threads, messages, episodes), ``POST /users`` 201 and 409 for a
``user_id`` that exists, ``POST /users/lookup``, threads created for a user UUID,
messages of at most 4,096 characters, 202 answers with a ``task`` for adds and
deletes (deletes of users carried out ``lag`` seconds later), ``Idempotency-Key``
(a repeated key gets the first answer and changes nothing), ``X-RateLimit-*``
headers on every answer, and the v4 error body ``{"error": {code, message, param,
details, request_id}}``. Writes are extracted into graph edges ``lag`` seconds later
(a user message or an episode becomes one edge; its name is the text before a ":"
in an episode, ``STATED`` for a message). What it cannot: Zep's real extraction and
ranking (edges match by the share of query words found). Routes not in v4's
documented set, modelled on v3: DELETE /threads/{uuid}, DELETE
/graphs/{graph}/episodes/{uuid}; the edge search answer's shape ``{items}``.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from tests.fake_service import FakeService, json_body, similarity

ROLES = {"norole", "system", "assistant", "user", "function", "tool"}


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()


class FakeZep(FakeService):
    scheme = "zep"
    key_env = "ZEP_API_KEY"
    auth_scheme = "Api-Key"
    base_path = "/api/v4"
    write_route = ("POST", r"/api/v4/(threads/[^/]+/messages|graphs/[^/]+/episodes)")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.users: dict[str, dict[str, Any]] = {}  # uuid -> user
        self.threads: dict[
            str, dict[str, Any]
        ] = {}  # uuid -> thread (with its messages)
        self.episodes: dict[
            str, dict[str, Any]
        ] = {}  # uuid -> episode (with graph uuid)
        self.edges: dict[str, dict[str, Any]] = {}  # uuid -> edge (with graph, episode)
        self._replies: dict[
            tuple[str, str], tuple[int, Any]
        ] = {}  # idempotency key -> answer
        self.limit(100_000)  # Zep sends X-RateLimit-* on every answer

    def item_ids(self) -> list[str]:
        said = [
            m["metadata"].get("lkm_id")
            for t in self.threads.values()
            for m in t["messages"]
            if m["role"] == "user"
        ]
        return said + [e["metadata"].get("lkm_id") for e in self.episodes.values()]

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        code = {
            400: "bad_request",
            401: "unauthorized",
            404: "not_found",
            409: "conflict",
            429: "rate_limited",
        }.get(status, "internal_error")
        return {
            "error": {
                "code": code,
                "message": message,
                "param": None,
                "details": None,
                "request_id": uuid.uuid4().hex,
            }
        }

    def routes(self, app: web.Application) -> None:
        r, v4 = app.router, self.base_path
        r.add_post(f"{v4}/users", self.idempotent(self.create_user))
        r.add_post(f"{v4}/users/lookup", self.lookup_user)
        r.add_delete(f"{v4}/users/{{uuid}}", self.idempotent(self.delete_user))
        r.add_post(f"{v4}/threads", self.idempotent(self.create_thread))
        r.add_delete(f"{v4}/threads/{{uuid}}", self.idempotent(self.delete_thread))
        r.add_post(
            f"{v4}/threads/{{uuid}}/messages", self.idempotent(self.add_messages)
        )
        r.add_post(f"{v4}/graphs/{{graph}}/episodes", self.idempotent(self.add_episode))
        r.add_delete(
            f"{v4}/graphs/{{graph}}/episodes/{{uuid}}",
            self.idempotent(self.delete_episode),
        )
        r.add_post(f"{v4}/graphs/{{graph}}/search/edges", self.search_edges)

    def idempotent(self, handler: Any) -> Any:
        """A repeated Idempotency-Key on the same route gets the first answer again."""

        async def run(request: web.Request) -> web.Response:
            key = request.headers.get("Idempotency-Key")
            if key and (request.path, key) in self._replies:
                status, body = self._replies[(request.path, key)]
                return web.json_response(body, status=status)
            answer = await handler(request, await json_body(request) or {})
            if key and answer.status < 300:
                self._replies[(request.path, key)] = (
                    answer.status,
                    json.loads(answer.text or ""),
                )
            return answer

        return run

    def task(self) -> dict[str, Any]:
        return {"uuid": str(uuid.uuid4()), "status": "pending", "type": "ingest"}

    def _extract(self, graph: str, episode: str | None, text: str, name: str) -> None:
        # Zep extracts facts asynchronously: the edge appears `lag` seconds later.
        edge_id, now = str(uuid.uuid4()), time.time()
        edge = {
            "uuid": edge_id,
            "fact": text,
            "name": name,
            "created_at": iso(now),
            "graph": graph,
            "episode": episode,
            "valid_at": iso(now),
        }
        asyncio.get_running_loop().call_later(
            self.lag, self.edges.__setitem__, edge_id, edge
        )

    async def create_user(
        self, request: web.Request, body: dict[str, Any]
    ) -> web.Response:
        external = body.get("user_id")
        if external is not None and (
            not isinstance(external, str) or not 1 <= len(external) <= 500
        ):
            return self.error(400, "user_id must be 1-500 characters")
        if external and any(u["user_id"] == external for u in self.users.values()):
            return self.error(409, f"user {external} already exists")
        user_uuid = str(uuid.uuid4())
        user = {"uuid": user_uuid, "user_id": external, "created_at": iso(time.time())}
        self.users[user_uuid] = user
        return web.json_response(user, status=201)

    async def lookup_user(self, request: web.Request) -> web.Response:
        external = (await json_body(request) or {}).get("user_id")
        user = next((u for u in self.users.values() if u["user_id"] == external), None)
        return web.json_response(user) if user else self.error(404, "user not found")

    async def delete_user(
        self, request: web.Request, body: dict[str, Any]
    ) -> web.Response:
        user = request.match_info["uuid"]
        if user not in self.users:
            return self.error(404, "user not found")

        def carry_out() -> None:  # when the task completes
            self.users.pop(user, None)
            for table in (self.threads, self.episodes, self.edges):
                for key in [
                    k
                    for k, v in table.items()
                    if user in (v.get("user_uuid"), v.get("graph"))
                ]:
                    del table[key]

        asyncio.get_running_loop().call_later(self.lag, carry_out)
        return web.json_response({"task": self.task()}, status=202)

    async def create_thread(
        self, request: web.Request, body: dict[str, Any]
    ) -> web.Response:
        if body.get("user_uuid") not in self.users:
            return self.error(404, "user not found")
        thread = {
            "uuid": str(uuid.uuid4()),
            "user_uuid": body["user_uuid"],
            "created_at": iso(time.time()),
        }
        self.threads[thread["uuid"]] = {**thread, "messages": []}
        return web.json_response(thread, status=201)

    async def delete_thread(
        self, request: web.Request, body: dict[str, Any]
    ) -> web.Response:
        if self.threads.pop(request.match_info["uuid"], None) is None:
            return self.error(404, "thread not found")
        return web.json_response({"task": self.task()}, status=202)

    async def add_messages(
        self, request: web.Request, body: dict[str, Any]
    ) -> web.Response:
        thread = self.threads.get(request.match_info["uuid"])
        if thread is None:
            return self.error(404, "thread not found")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return self.error(400, "messages is required")
        for m in messages:
            if (
                not isinstance(m, dict)
                or m.get("role") not in ROLES
                or not isinstance(m.get("content"), str)
            ):
                return self.error(400, "each message needs a role and content")
            if len(m["content"]) > 4096:
                return self.error(400, "message content is longer than 4096 characters")
            if len(m.get("metadata") or {}) > 10:
                return self.error(400, "metadata has more than 10 keys")
        stored = [
            {**m, "uuid": str(uuid.uuid4()), "created_at": iso(time.time())}
            for m in messages
        ]
        thread["messages"].extend(stored)
        for m in stored:
            if m["role"] == "user":
                self._extract(thread["user_uuid"], None, m["content"], "STATED")
        return web.json_response({"messages": stored, "task": self.task()}, status=202)

    async def add_episode(
        self, request: web.Request, body: dict[str, Any]
    ) -> web.Response:
        graph = request.match_info["graph"]
        if graph not in self.users:
            return self.error(404, "graph not found")
        data = body.get("data")
        if not isinstance(data, str) or not 1 <= len(data) <= 10_000:
            return self.error(400, "data must be 1-10000 characters")
        episode: dict[str, Any] = {
            "uuid": str(uuid.uuid4()),
            "content": data,
            "created_at": iso(time.time()),
            "processed": False,
            "graph": graph,
            "metadata": body.get("metadata") or {},
        }
        self.episodes[episode["uuid"]] = episode
        label = re.match(r"([\w ]{1,40}):", data)
        self._extract(
            graph,
            episode["uuid"],
            data,
            label[1].upper().replace(" ", "_") if label else "STATED",
        )
        shown = {k: v for k, v in episode.items() if k != "graph"}
        return web.json_response({"episode": shown, "task": self.task()}, status=202)

    async def delete_episode(
        self, request: web.Request, body: dict[str, Any]
    ) -> web.Response:
        episode = request.match_info["uuid"]
        if self.episodes.pop(episode, None) is None:
            return self.error(404, "episode not found")
        for edge in [k for k, e in self.edges.items() if e["episode"] == episode]:
            del self.edges[edge]  # edges only this episode produced go with it
        return web.json_response({"task": self.task()}, status=202)

    async def search_edges(self, request: web.Request) -> web.Response:
        graph = request.match_info["graph"]
        query = (await json_body(request) or {}).get("query")
        if not isinstance(query, str) or not query:
            return self.error(400, "query is required")
        size = int(request.query.get("page_size", 10))
        if not 1 <= size <= 50:
            return self.error(400, "page_size must be 1-50")
        scored = sorted(
            (
                (similarity(query, e["fact"]), e)
                for e in self.edges.values()
                if e["graph"] == graph
            ),
            key=lambda s: -s[0],
        )
        items = [
            {
                **{k: v for k, v in e.items() if k not in ("graph", "episode")},
                "score": s,
            }
            for s, e in scored
            if s >= 0.3
        ]
        return web.json_response({"items": items[:size], "next_cursor": None})


FAKE = FakeZep
