"""A fake of Supermemory's v5 API on localhost, for offline tests (sources: the v5
OpenAPI in github supermemoryai/python-sdk, ``fern/openapi.json``; the ``supermemory``
5.0.1 SDK; supermemory.ai/docs/v5/api-reference).

What it follows: the routes the store uses, ``Authorization: Bearer``, the namespace
rule (1-100 of ``[a-zA-Z0-9_:-]``), JSON bodies with no unknown keys
(``additionalProperties: false``: 400 with the ValidationError body), the document
``id`` as upsert key (an unchanged resend answers ``done``, new work ``queued``),
search that sees a document only ``lag`` seconds after it was written, v5
FilterExpressions over metadata, page/limit/sort/order listing, the per-id
``errors`` of deletes and the error body ``{"error", "details"}``. What it cannot:
Supermemory's semantic ranking and memory extraction (search scores are the share
of query words found; results are chunks, one per document).
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

from aiohttp import web

from tests.fake_service import FakeService, json_body, similarity

NAMESPACE = re.compile(r"[a-zA-Z0-9_:-]{1,100}")
ADD_KEYS = {
    "content",
    "id",
    "supportingContext",
    "metadata",
    "group",
    "date",
    "taskType",
    "dreaming",
}
SEARCH_KEYS = {
    "query",
    "searchMode",
    "limit",
    "threshold",
    "filter",
    "include",
    "rerank",
    "rewriteQuery",
}
LIST_KEYS = {"filter", "include"}
OPERATORS = {
    "eq": lambda a, b: a == b,
    "neq": lambda a, b: a != b,
    "gt": lambda a, b: a is not None and a > b,
    "gte": lambda a, b: a is not None and a >= b,
    "lt": lambda a, b: a is not None and a < b,
    "lte": lambda a, b: a is not None and a <= b,
    "contains": lambda a, b: isinstance(a, str) and b in a,
    "arrayContains": lambda a, b: isinstance(a, list) and b in a,
}


def matches(expression: dict[str, Any] | None, metadata: dict[str, Any]) -> bool:
    """Whether metadata satisfies a v5 FilterExpression (predicate or and/or group)."""
    if not expression:
        return True
    if expression.get("operator") in ("and", "or"):
        results = [matches(e, metadata) for e in expression["operands"]]
        return all(results) if expression["operator"] == "and" else any(results)
    return OPERATORS[expression["operator"]](
        metadata.get(expression["field"]), expression["value"]
    )


class FakeSupermemory(FakeService):
    scheme = "supermemory"
    key_env = "SUPERMEMORY_API_KEY"
    auth_scheme = "Bearer"
    write_route = ("POST", r"/ns/[^/]+/document")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.namespaces: dict[
            str, dict[str, dict[str, Any]]
        ] = {}  # ns -> doc id -> document

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return {"error": message, "details": f"status {status}"}

    def item_ids(self) -> list[str]:
        found = [
            d["metadata"].get("lkm_id")
            for ns in self.namespaces.values()
            for d in ns.values()
        ]
        return [i for i in found if i is not None]  # (an erasure mark is no item)

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/ns/{ns}/document", self.add)
        app.router.add_delete("/ns/{ns}/document", self.delete_documents)
        app.router.add_post("/ns/{ns}/search", self.search)
        app.router.add_post("/ns/{ns}/list/{type}", self.list)
        app.router.add_delete("/ns/{ns}", self.delete_namespace)

    async def _check(
        self, request: web.Request, allowed: set[str]
    ) -> web.Response | dict[str, Any]:
        """The JSON body (an object, {} when absent), or the 400 answer to send."""
        if not NAMESPACE.fullmatch(request.match_info["ns"]):
            return self.error(
                400, "namespace must be 1-100 characters of [a-zA-Z0-9_:-]"
            )
        body = await json_body(request)
        if body is not None and not isinstance(body, dict):
            return self.error(400, "body must be an object")
        unknown = sorted(set(body or {}) - allowed)
        if unknown:  # additionalProperties: false -> ValidationError body
            issues = [
                {"message": f"Unrecognized key: {k}", "path": [k]} for k in unknown
            ]
            return web.json_response(
                {"success": False, "error": issues, "data": body}, status=400
            )
        return body or {}

    async def add(self, request: web.Request) -> web.Response:
        body = await self._check(request, ADD_KEYS)
        if isinstance(body, web.Response):
            return body
        content, doc_id = body.get("content"), body.get("id") or uuid.uuid4().hex
        if not isinstance(content, str) or not content:
            return self.error(400, "content is required")
        if not isinstance(doc_id, str) or not 1 <= len(doc_id) <= 255:
            return self.error(400, "id must be 1-255 characters")
        metadata = body.get("metadata") or {}
        for key, value in metadata.items():
            scalar = isinstance(value, (str, int, float, bool))
            if not (
                scalar
                or (isinstance(value, list) and all(isinstance(v, str) for v in value))
            ):
                return self.error(
                    400, f"metadata.{key} must be a string, number, boolean or string[]"
                )
        docs = self.namespaces.setdefault(request.match_info["ns"], {})
        old = docs.get(doc_id)
        if old and old["content"] == content and old["metadata"] == metadata:
            return web.json_response({"id": doc_id, "status": "done"})
        now = time.time()
        docs[doc_id] = {
            "id": doc_id,
            "content": content,
            "metadata": metadata,
            "status": "queued",
            "createdAt": old["createdAt"] if old else now,
            "updatedAt": now,
            "searchable_at": self.visible_at(),
            "versions": (old["versions"] + 1) if old else 1,
        }
        return web.json_response({"id": doc_id, "status": "queued"})

    async def search(self, request: web.Request) -> web.Response:
        body = await self._check(request, SEARCH_KEYS)
        if isinstance(body, web.Response):
            return body
        query = body.get("query")
        if not isinstance(query, str) or not query:
            return self.error(400, "query must have at least 1 character")
        limit = body.get("limit", 10)
        if not isinstance(limit, int) or not 1 <= limit <= 100:
            return self.error(400, "limit must be 1-100")
        threshold, now = body.get("threshold", 0.3), time.time()
        scored = []
        for doc in self.namespaces.get(request.match_info["ns"], {}).values():
            score = similarity(query, doc["content"])
            if (
                doc["searchable_at"] <= now
                and score >= threshold
                and matches(body.get("filter"), doc["metadata"])
            ):
                scored.append((score, doc))
        scored.sort(key=lambda s: -s[0])
        results = [
            {
                "id": f"{doc['id']}-chunk-0",
                "chunk": doc["content"],
                "metadata": doc["metadata"],
                "similarity": score,
                "isLatest": True,
                "isInference": False,
                "system": {
                    "createdAt": doc["createdAt"],
                    "updatedAt": doc["updatedAt"],
                },
            }
            for score, doc in scored[:limit]
        ]
        return web.json_response({"results": results, "searchTime": 1.0})

    async def list(self, request: web.Request) -> web.Response:
        body = await self._check(request, LIST_KEYS)
        if isinstance(body, web.Response):
            return body
        kind = request.match_info["type"]
        if kind not in ("documents", "chunks", "memories"):
            return self.error(404, f"no list of {kind}")
        try:
            page, limit = (
                int(request.query.get("page", 1)),
                int(request.query.get("limit", 10)),
            )
        except ValueError:
            return self.error(400, "page and limit must be integers")
        if not 1 <= limit <= 100 or page < 1:
            return self.error(400, "limit must be 1-100 and page at least 1")
        sort, order = (
            request.query.get("sort", "createdAt"),
            request.query.get("order", "desc"),
        )
        if sort not in ("createdAt", "updatedAt") or order not in ("asc", "desc"):
            return self.error(400, "sort is createdAt|updatedAt, order asc|desc")
        docs = [
            d
            for d in self.namespaces.get(request.match_info["ns"], {}).values()
            if matches(body.get("filter"), d["metadata"])
        ]
        docs.sort(key=lambda d: d[sort], reverse=order == "desc")
        shown = [
            {
                k: d[k]
                for k in (
                    "id",
                    "content",
                    "metadata",
                    "status",
                    "createdAt",
                    "updatedAt",
                )
            }
            for d in docs[(page - 1) * limit : page * limit]
        ]
        pages = max(1, -(-len(docs) // limit))
        return web.json_response(
            {
                "documents": shown if kind == "documents" else [],
                "chunks": [],
                "memories": [],
                "pagination": {
                    "currentPage": page,
                    "limit": limit,
                    "totalItems": len(docs),
                    "totalPages": pages,
                },
            }
        )

    async def delete_documents(self, request: web.Request) -> web.Response:
        body = await self._check(request, {"ids"})
        if isinstance(body, web.Response):
            return body
        ids = body.get("ids")
        if not isinstance(ids, list) or not 1 <= len(ids) <= 100:
            return self.error(400, "ids must be a list of 1-100 document ids")
        docs = self.namespaces.get(request.match_info["ns"], {})
        gone = [i for i in ids if docs.pop(i, None) is not None]
        errors = [
            {"id": i, "error": "Document not found"} for i in ids if i not in gone
        ]
        return web.json_response({"count": len(gone), "errors": errors})

    async def delete_namespace(self, request: web.Request) -> web.Response:
        body = await self._check(request, set())
        if isinstance(body, web.Response):
            return body
        docs = self.namespaces.pop(request.match_info["ns"], None)
        if docs is None:
            return self.error(404, "Namespace not found")
        return web.json_response(
            {
                "status": "deleted",
                "namespace": request.match_info["ns"],
                "deletedDocumentsCount": len(docs),
                "deletedMemoriesCount": 0,
            }
        )


FAKE = FakeSupermemory
