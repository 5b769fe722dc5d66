"""A fake of the Mem0 Platform's API on localhost, for offline tests (sources: github
mem0ai/mem0, ``docs/openapi.json`` and ``docs/api-reference``; the ``mem0ai`` 2.2.1 SDK).

What it follows: ``Authorization: Token``, trailing slashes, ``add`` with at least
one entity id at the top level and ``infer: false`` answered with the new memory
ids, ``search`` and ``get_all`` with the entity ids inside ``filters`` (a top-level
``user_id`` is a 400) and sibling filter keys ANDed, ``metadata`` filters, page /
page_size / ``next`` paging, ``update`` (PUT), single deletes (404 when gone),
entity deletes that are queued (carried out ``lag`` seconds later, as Mem0 answers
with an ``event_id``), and the error bodies (400 ``{"error", "details":
{"message"}}``, 401 ``{"detail"}``, 404 ``{"error"}``). No idempotency: a resend is
stored again. Search sees a write ``lag`` seconds later (Mem0 documents
``infer: false`` adds as synchronous; the fake lags them anyway, the harder case).
What it cannot: Mem0's semantic scores (the share of query words found).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from aiohttp import web

from tests.fake_service import FakeService, json_body, similarity

ENTITY_IDS = ("user_id", "agent_id", "app_id", "run_id")


def matches(filters: dict[str, Any], memory: dict[str, Any]) -> bool:
    """Mem0 v2/v3 filters: entity ids, ``metadata`` (every key equal), AND/OR/NOT."""
    for key, value in filters.items():
        if key == "AND" and not all(matches(f, memory) for f in value):
            return False
        if key == "OR" and not any(matches(f, memory) for f in value):
            return False
        if key == "NOT" and any(matches(f, memory) for f in value):
            return False
        if key == "metadata" and any(
            memory["metadata"].get(k) != v for k, v in value.items()
        ):
            return False
        if key in ENTITY_IDS and value != "*" and memory.get(key) != value:
            return False
    return True


def has_entity(filters: Any) -> bool:
    if not isinstance(filters, dict):
        return False
    nested = [f for k in ("AND", "OR") for f in filters.get(k, [])]
    return any(k in filters for k in ENTITY_IDS) or any(has_entity(f) for f in nested)


class FakeMem0(FakeService):
    scheme = "mem0"
    key_env = "MEM0_API_KEY"
    auth_scheme = "Token"
    write_route = ("POST", r"/v3/memories/add/")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.memories: dict[str, dict[str, Any]] = {}  # memory id -> memory

    def item_ids(self) -> list[str]:
        found = [m["metadata"].get("lkm_id") for m in self.memories.values()]
        return [i for i in found if i is not None]  # (an erasure mark is no item)

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        if status == 400:
            return {"error": "400 Bad Request", "details": {"message": message}}
        return {"detail": message} if status == 401 else {"error": message}

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v3/memories/add/", self.add)
        app.router.add_post("/v3/memories/search/", self.search)
        app.router.add_post("/v3/memories/", self.get_all)
        app.router.add_put("/v1/memories/{id}/", self.update)
        app.router.add_delete("/v1/memories/{id}/", self.delete)
        app.router.add_delete("/v2/entities/{type}/{entity}/", self.delete_entity)

    def _shown(self, m: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in m.items() if k != "searchable_at"}

    async def add(self, request: web.Request) -> web.Response:
        body = await json_body(request) or {}
        messages = body.get("messages")
        if (
            not isinstance(messages, list)
            or not messages
            or not all(
                isinstance(m, dict)
                and m.get("role") in ("user", "assistant", "system")
                and isinstance(m.get("content"), str)
                for m in messages
            )
        ):
            return self.error(400, "messages must be a list of {role, content}")
        if not any(body.get(k) for k in ENTITY_IDS):
            return self.error(
                400, "one of user_id, agent_id, app_id, run_id is required"
            )
        event = str(uuid.uuid4())
        if body.get("infer", True):
            return web.json_response({"event_id": event, "status": "PENDING"})
        results = []
        now = time.time()
        for message in messages:  # infer: false stores each message verbatim
            memory_id = str(uuid.uuid4())
            self.memories[memory_id] = {
                "id": memory_id,
                "memory": message["content"],
                "metadata": body.get("metadata") or {},
                **{k: body.get(k) for k in ENTITY_IDS},
                "categories": [],
                "created_at": now,
                "updated_at": now,
                "searchable_at": self.visible_at(),
            }
            results.append(
                {
                    "id": memory_id,
                    "data": {"memory": message["content"]},
                    "event": "ADD",
                }
            )
        return web.json_response(
            {
                "event_id": event,
                "status": "SUCCEEDED",
                "message": "ok",
                "results": results,
            }
        )

    async def search(self, request: web.Request) -> web.Response:
        body = await json_body(request) or {}
        if any(k in body for k in ENTITY_IDS):
            return self.error(400, "entity ids go inside filters")
        query, filters = body.get("query"), body.get("filters") or {}
        if not isinstance(query, str) or not query.strip():
            return self.error(400, "query is required")
        if not has_entity(filters):
            return self.error(400, "filters must name at least one entity id")
        top_k = body.get("top_k", 10)
        if not isinstance(top_k, int) or not 1 <= top_k <= 1000:
            return self.error(400, "top_k must be 1-1000")
        threshold, now = body.get("threshold", 0.1), time.time()
        scored = sorted(
            (
                (similarity(query, m["memory"]), m)
                for m in self.memories.values()
                if m["searchable_at"] <= now and matches(filters, m)
            ),
            key=lambda s: -s[0],
        )
        results = [
            {**self._shown(m), "score": score}
            for score, m in scored
            if score >= threshold
        ]
        return web.json_response({"results": results[:top_k]})

    async def get_all(self, request: web.Request) -> web.Response:
        body = await json_body(request) or {}
        if not has_entity(body.get("filters")):
            return self.error(400, "filters must name at least one entity id")
        try:
            page, size = (
                int(request.query.get("page", 1)),
                int(request.query.get("page_size", 100)),
            )
        except ValueError:
            return self.error(400, "page and page_size must be integers")
        if page < 1 or not 1 <= size <= 200:
            return self.error(400, "page_size must be 1-200")
        found = [
            self._shown(m)
            for m in self.memories.values()
            if matches(body["filters"], m)
        ]
        more = page * size < len(found)
        return web.json_response(
            {
                "count": len(found),
                "next": f"{request.url.with_query(page=page + 1, page_size=size)}"
                if more
                else None,
                "previous": None,
                "results": found[(page - 1) * size : page * size],
            }
        )

    async def update(self, request: web.Request) -> web.Response:
        body = await json_body(request) or {}
        memory = self.memories.get(request.match_info["id"])
        if memory is None:
            return self.error(404, "Memory not found")
        if "text" in body:
            memory["memory"] = body["text"]
            memory["searchable_at"] = self.visible_at()
        if "metadata" in body:
            memory["metadata"] = body["metadata"]
        memory["updated_at"] = time.time()
        return web.json_response(self._shown(memory))

    async def delete(self, request: web.Request) -> web.Response:
        if self.memories.pop(request.match_info["id"], None) is None:
            return self.error(404, "Memory not found")
        return web.json_response({"message": "Memory deleted successfully!"})

    async def delete_entity(self, request: web.Request) -> web.Response:
        kind, entity = request.match_info["type"], request.match_info["entity"]
        if kind not in ("user", "agent", "app", "run"):
            return web.json_response(
                {"message": f"invalid entity type {kind}"}, status=400
            )

        def carry_out() -> None:  # queued: Mem0 deletes after answering
            for memory_id in [
                i for i, m in self.memories.items() if m.get(f"{kind}_id") == entity
            ]:
                del self.memories[memory_id]

        asyncio.get_running_loop().call_later(self.lag, carry_out)
        return web.json_response(
            {"message": "Entity deletion queued", "event_id": str(uuid.uuid4())}
        )


FAKE = FakeMem0
