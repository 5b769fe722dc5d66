"""Memory kept at the Mem0 Platform (https://mem0.ai), over its v3 HTTP API.

``MEMORY_URL=mem0://api.mem0.ai`` and ``MEM0_API_KEY`` (see .env.example). Each
caller is one Mem0 user; each exchange, fact and call summary is one memory, stored
verbatim (``infer: false``) with the item's fields as its metadata, so it reads back
exactly. Mem0's own extraction (``infer: true``) is not used: it is asynchronous,
answers with no memory ids (so a retry could not be recognised) and rewrites the
caller's words. hosted.py does the rest: the durable outbox, retries, write-lag
merging, forgetting. Routes and shapes are from Mem0's OpenAPI and API
reference (github mem0ai/mem0, ``docs/openapi.json`` and ``docs/api-reference``) and the
``mem0ai`` 2.2.1 SDK; method names follow the SDK (``add``, ``search``,
``get_all``, ``update``, ``delete``, ``delete_users``). No ``GET /v1/ping/``.

Caller ids -> user ids: Mem0 documents no character or length rule for ``user_id``
[M0-OAS], so ``user_id(caller_id)`` is ``lkmem:`` + the caller id, unchanged:
deterministic and collision-free, and apart from the organisation's other users.

Erasures: after the caller's user is deleted, one memory of the user
``erasure_user_id(caller_id)`` records when (metadata only, no words), so workers
with outboxes of their own learn of the erasure (``erased_at``). It stays there: it
holds the caller id and the times, nothing said.

Idempotency: Mem0 has no idempotency key and no caller-chosen memory id; a resend
is stored again [M0-OAS memories_add_v3]. The outbox is the ledger: it keeps each
item's Mem0 memory id, so a new version is an ``update`` (PUT) of that memory, and
a retry after a try whose outcome is unknown (an answer lost, a worker killed)
first looks the item up by its id in the metadata. A request still in flight at
Mem0 when that look-up runs can still leave a second memory of the item: forgetting
deletes every memory with the item's id in its metadata, not only the one the ledger
kept, and deletes again ``outbox_erase.LATE_WRITES`` later when a write in its scope was not
confirmed.
"""

from __future__ import annotations

from typing import Any

from .hosted import (
    DELIVERY_TIMEOUT,
    Item,
    Service,
    ServiceRejectedError,
    open_hosted,
    path,
)

PAGE_SIZE = 200
"""Memories per list request (the API's maximum [M0-OAS])."""
MAX_PAGES = 10
"""List pages read at most per request (2,000 memories per caller)."""
KEYS_PER_LOOKUP = 50
"""Item ids (``lkm_id``) one ``get_all`` looks up when deleting their copies."""


def open_store(url: str):
    """Open the store a ``mem0:`` URL names (hosted.open_hosted: no network yet).
    Raises InvalidStoreUrlError (bad URL, MEM0_API_KEY unset) or
    StoreUnavailableError (outbox file unusable)."""
    return open_hosted(url, Mem0)


def user_id(caller_id: str) -> str:
    """The caller's Mem0 ``user_id`` (see the module docstring)."""
    return "lkmem:" + caller_id


def erasure_user_id(caller_id: str) -> str:
    """The Mem0 user that holds the times the caller was erased: ``lkmem-erased:`` +
    the caller id (apart from every ``user_id``, which starts ``lkmem:``)."""
    return "lkmem-erased:" + caller_id


class Mem0(Service):
    name = "Mem0"
    scheme = "mem0"
    default_host = "api.mem0.ai"
    key_env = "MEM0_API_KEY"
    auth_scheme = "Token"

    async def put(self, item: Item, attempts: int) -> dict[str, Any]:
        memory_id = item.remote.get("memory_id")
        if memory_id is None and attempts:  # an earlier try may have been stored
            memory_id = await self._find(item)
        if memory_id is not None:
            try:
                await self.update(memory_id, item)
                return {"memory_id": memory_id}
            except ServiceRejectedError as exc:
                if exc.status != 404:  # 404: deleted at Mem0 meanwhile, add it again
                    raise
        return {"memory_id": await self.add(item)}

    async def add(self, item: Item) -> str:
        """``add``: POST /v3/memories/add/ with ``infer: false`` (stored verbatim and at
        once). 200 {event_id, status, message, results: [{id, data: {memory}, event}]}."""
        body = {
            "messages": [{"role": "user", "content": item.text()}],
            "user_id": user_id(item.caller_id),
            "metadata": item.metadata(),
            "infer": False,
        }
        answer = await self.http.call(
            "POST",
            path("v3", "memories", "add") + "/",
            json=body,
            timeout=DELIVERY_TIMEOUT,
        )
        return answer["results"][0]["id"]

    async def update(self, memory_id: str, item: Item) -> None:
        """``update``: PUT /v1/memories/{id}/ {text, metadata}; 404 if it is gone."""
        body = {"text": item.text(), "metadata": item.metadata()}
        await self.http.call(
            "PUT",
            path("v1", "memories", memory_id) + "/",
            json=body,
            timeout=DELIVERY_TIMEOUT,
        )

    async def _find(self, item: Item) -> str | None:
        found = await self.get_all(
            item.caller_id, {"metadata": {"lkm_id": item.id}}, pages=1
        )
        return found[0]["id"] if found else None

    async def get_all(
        self,
        caller_id: str,
        filters: dict[str, Any] | None = None,
        pages: int = MAX_PAGES,
    ) -> list[dict[str, Any]]:
        """``get_all``: POST /v3/memories/?page=&page_size= {filters}, page after page
        while ``next`` is set. 200 {count, next, previous, results: [memory]}."""
        found: list[dict[str, Any]] = []
        for page in range(1, pages + 1):
            answer = await self.http.call(
                "POST",
                path("v3", "memories") + "/",
                params={"page": page, "page_size": PAGE_SIZE},
                json={"filters": {"user_id": user_id(caller_id), **(filters or {})}},
            )
            found.extend(answer["results"])
            if not answer.get("next"):
                break
        return found

    async def search(self, caller_id: str, query: str, limit: int) -> list[Item]:
        """``search``: POST /v3/memories/search/ {query, filters, top_k}; the user id
        must be inside ``filters`` (top level is a 400). 200 {results: [memory + score]}."""
        body = {
            "query": query,
            "filters": {
                "user_id": user_id(caller_id),
                "metadata": {"lkm_type": "exchange"},
            },
            "top_k": max(1, min(1000, limit)),
        }
        answer = await self.http.call(
            "POST", path("v3", "memories", "search") + "/", json=body
        )
        return _items(caller_id, answer["results"])

    async def listing(self, caller_id: str, kinds: tuple[str, ...]) -> list[Item]:
        wanted = {"OR": [{"metadata": {"lkm_type": k}} for k in kinds]}
        return [
            i
            for i in _items(caller_id, await self.get_all(caller_id, wanted))
            if i.kind in kinds
        ]

    async def delete(
        self, caller_id: str, items: list[tuple[str, dict[str, Any]]]
    ) -> None:
        """``delete``: DELETE /v1/memories/{id}/ for every copy of each item: the
        memory ids the ledger kept and every memory whose metadata has the item's
        ``lkm_id`` (``get_all``; a retry after a write Mem0 carried out late leaves
        a second memory); 404 = already gone."""
        memory_ids = {r["memory_id"] for _, r in items if r.get("memory_id")}
        wanted = sorted({item_id for item_id, _ in items})
        for start in range(0, len(wanted), KEYS_PER_LOOKUP):
            keys = wanted[start : start + KEYS_PER_LOOKUP]
            copies = {"OR": [{"metadata": {"lkm_id": k}} for k in keys]}
            memory_ids |= {m["id"] for m in await self.get_all(caller_id, copies)}
        for memory_id in sorted(memory_ids):
            await self.http.call(
                "DELETE",
                path("v1", "memories", memory_id) + "/",
                ok=(404,),
                timeout=DELIVERY_TIMEOUT,
            )

    async def mark_erased(self, caller_id: str, before: float) -> None:
        """``add`` (``infer: false``) of one memory of the user ``erasure_user_id``,
        with the time as metadata: the caller's own user is being deleted (queued),
        which would take a mark kept there with it."""
        body = {
            "messages": [{"role": "user", "content": "Memory erased."}],
            "user_id": erasure_user_id(caller_id),
            "metadata": {"lkm_type": "erasure", "lkm_before": before},
            "infer": False,
        }
        await self.http.call(
            "POST",
            path("v3", "memories", "add") + "/",
            json=body,
            timeout=DELIVERY_TIMEOUT,
        )

    async def erased_at(self, caller_id: str) -> float:
        """``get_all`` of the erasure marks (``mark_erased``); the latest time."""
        answer = await self.http.call(
            "POST",
            path("v3", "memories") + "/",
            params={"page": 1, "page_size": PAGE_SIZE},
            json={"filters": {"user_id": erasure_user_id(caller_id)}},
        )
        times = [(m.get("metadata") or {}).get("lkm_before") for m in answer["results"]]
        return max(
            (float(t) for t in times if isinstance(t, (int, float))), default=0.0
        )

    async def delete_caller(self, caller_id: str) -> None:
        """``delete_users``: DELETE /v2/entities/user/{user_id}/; 200 {message,
        event_id}: queued, Mem0 deletes shortly after (the outbox hides the rest)."""
        await self.http.call(
            "DELETE",
            path("v2", "entities", "user", user_id(caller_id)) + "/",
            ok=(404,),
            timeout=DELIVERY_TIMEOUT,
        )


def _items(caller_id: str, memories: list[dict[str, Any]]) -> list[Item]:
    found = (
        Item.from_metadata(caller_id, m.get("metadata"), {"memory_id": m["id"]})
        for m in memories
    )
    return [i for i in found if i is not None]
