"""Memory kept at Supermemory (https://supermemory.ai), over its v5 HTTP API.

``MEMORY_URL=supermemory://api.supermemory.ai`` and ``SUPERMEMORY_API_KEY`` (see
.env.example). Each caller is one Supermemory namespace; each exchange, fact and
call summary is one document in it, with the caller's words as its content (which
Supermemory indexes and extracts memories from) and the item's fields as its
metadata (so it reads back exactly). hosted.py does the rest: the durable outbox,
retries, write-lag merging, forgetting. Routes, shapes and rules are from
Supermemory's v5 OpenAPI (github supermemoryai/python-sdk, ``fern/openapi.json``), the
``supermemory`` 5.0.1 SDK and supermemory.ai/docs/v5/api-reference; method names
follow the v5 SDK (``add``, ``search``, ``list``, ``documents.delete``,
``namespaces.delete``).

Caller ids -> namespaces: a namespace is 1-100 characters of ``[a-zA-Z0-9_:-]``
[SM-OAS5]. ``namespace(caller_id)`` is ``lkmem:`` + the caller id with ``_ . @ +``
written ``__ _d _a _p`` (``:`` and ``-`` kept), or ``lkmem:_h`` + its SHA-256 when
that would pass 100 characters (``hosted.service_id``): deterministic, and two
callers never share a namespace. The prefix keeps the kit's namespaces apart from
any others in the same Supermemory organisation.

Erasures: once the namespace is deleted, a document with the erasure's time (and
no words) is written in it, so workers with outboxes of their own learn of the
erasure (``erased_at``) and drop what their live calls and outboxes hold from before.

Idempotency: the document ``id`` is the item's id (the exchange key; ``fact-<kind
hash>``; ``summary-<call hash>``), Supermemory's upsert key [SM-OAS5]: a resend is
a no-op, a new version replaces the content.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from .hosted import (
    DELIVERY_TIMEOUT,
    Item,
    Service,
    ServiceUnavailableError,
    open_hosted,
    path,
    service_id,
)

PAGE = 100
"""Documents per list request (the API's maximum [SM-V5DOCS list-resources])."""
MAX_PAGES = 20
"""List pages read at most per request (2,000 documents of one kind per caller)."""
DELETE_BATCH = 100
"""Document ids per delete request (the API's maximum [SM-OAS5])."""


def open_store(url: str):
    """Open the store a ``supermemory:`` URL names (hosted.open_hosted: no network yet).
    Raises InvalidStoreUrlError (bad URL, SUPERMEMORY_API_KEY unset) or
    StoreUnavailableError (outbox file unusable)."""
    return open_hosted(url, Supermemory)


def namespace(caller_id: str) -> str:
    """The caller's Supermemory namespace (see the module docstring)."""
    return service_id(caller_id, prefix="lkmem:", max_chars=100)


def kind_filter(kinds: tuple[str, ...]) -> dict[str, Any]:
    """A v5 FilterExpression: the item kind is one of ``kinds`` [SM-OAS5]."""
    predicates = [{"field": "lkm_type", "operator": "eq", "value": k} for k in kinds]
    return (
        predicates[0]
        if len(predicates) == 1
        else {"operator": "or", "operands": predicates}
    )


class Supermemory(Service):
    name = "Supermemory"
    scheme = "supermemory"
    default_host = "api.supermemory.ai"
    key_env = "SUPERMEMORY_API_KEY"
    auth_scheme = "Bearer"

    async def put(self, item: Item, attempts: int) -> dict[str, Any]:
        """``add``: POST /ns/{ns}/document; 200 {id, status} (processing is queued)."""
        body = {
            "content": item.text(),
            "id": item.id,
            "metadata": item.metadata(),
            "date": datetime.fromtimestamp(item.at, UTC).isoformat(),
        }
        await self.http.call(
            "POST",
            path("ns", namespace(item.caller_id), "document"),
            json=body,
            timeout=DELIVERY_TIMEOUT,
        )
        return {}

    async def search(self, caller_id: str, query: str, limit: int) -> list[Item]:
        """``search`` in chunks of the caller's exchange documents, best first.
        200 {results: [{id, chunk | memory, metadata, similarity, ...}], searchTime}."""
        body = {
            "query": query,
            "searchMode": "chunks",
            "limit": max(1, min(100, limit)),
            "filter": kind_filter(("exchange",)),
        }
        answer = await self.http.call(
            "POST", path("ns", namespace(caller_id), "search"), json=body
        )
        found = (
            Item.from_metadata(caller_id, r.get("metadata")) for r in answer["results"]
        )
        return [i for i in found if i is not None]

    async def listing(self, caller_id: str, kinds: tuple[str, ...]) -> list[Item]:
        """``list``: POST /ns/{ns}/list/documents, every page (at most MAX_PAGES).
        200 {documents: [...], pagination: {currentPage, totalPages, ...}}."""
        items: list[Item] = []
        for page in range(1, MAX_PAGES + 1):
            answer = await self.http.call(
                "POST",
                path("ns", namespace(caller_id), "list", "documents"),
                params={
                    "page": page,
                    "limit": PAGE,
                    "sort": "createdAt",
                    "order": "asc",
                },
                json={"filter": kind_filter(kinds)},
            )
            for document in answer["documents"]:
                item = Item.from_metadata(caller_id, document.get("metadata"))
                if item is not None and item.kind in kinds:
                    items.append(item)
            if page >= answer["pagination"]["totalPages"]:
                break
        return items

    async def delete(
        self, caller_id: str, items: list[tuple[str, dict[str, Any]]]
    ) -> None:
        """``documents.delete``: DELETE /ns/{ns}/document {ids} (permanent). 200 {count,
        errors: [{id, error}]}: HTTP 200 does not mean every id was deleted [SM-OAS5]."""
        ids = [item_id for item_id, _ in items]
        for start in range(0, len(ids), DELETE_BATCH):
            answer = await self.http.call(
                "DELETE",
                path("ns", namespace(caller_id), "document"),
                json={"ids": ids[start : start + DELETE_BATCH]},
                ok=(404,),
                timeout=DELIVERY_TIMEOUT,
            )
            errors = [
                e
                for e in (answer or {}).get("errors", [])
                if "not found" not in str(e).lower()
            ]
            if errors:
                raise ServiceUnavailableError(
                    f"Supermemory could not delete {len(errors)} document(s): {errors[:3]}"
                )

    async def mark_erased(self, caller_id: str, before: float) -> None:
        """``add`` of a document ``lkm-erasure-<ms>`` in the (emptied) namespace, with
        the time as metadata: no words of the caller's, only that and when."""
        body = {
            "content": "A record of when this caller's memory was erased.",
            "id": f"lkm-erasure-{int(before * 1000)}",
            "metadata": {"lkm_type": "erasure", "lkm_before": before},
        }
        await self.http.call(
            "POST",
            path("ns", namespace(caller_id), "document"),
            json=body,
            timeout=DELIVERY_TIMEOUT,
        )

    async def erased_at(self, caller_id: str) -> float:
        """``list`` of the namespace's erasure documents (newest first)."""
        answer = await self.http.call(
            "POST",
            path("ns", namespace(caller_id), "list", "documents"),
            params={"page": 1, "limit": PAGE, "sort": "createdAt", "order": "desc"},
            json={"filter": kind_filter(("erasure",))},
            ok=(404,),
        )
        times = [
            d.get("metadata", {}).get("lkm_before")
            for d in (answer or {}).get("documents", [])
        ]
        return max(
            (float(t) for t in times if isinstance(t, (int, float))), default=0.0
        )

    async def delete_caller(self, caller_id: str) -> None:
        """``namespaces.delete``: DELETE /ns/{ns} (no ``moveTo``: permanent). 200
        {status: "deleted", deletedDocumentsCount, ...}; 404 = nothing to delete."""
        await self.http.call(
            "DELETE",
            path("ns", namespace(caller_id)),
            ok=(404,),
            timeout=DELIVERY_TIMEOUT,
        )
