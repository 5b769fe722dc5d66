"""Memory kept at Zep Cloud (https://www.getzep.com), over its v4 HTTP API.

``MEMORY_URL=zep://api.getzep.com`` and ``ZEP_API_KEY`` (see .env.example). Each
caller is one Zep user, each call one Zep thread: exchanges are the thread's
messages (the caller's and the agent's), facts and call summaries are episodes of
the user's graph, from which Zep extracts facts of its own. Recall asks Zep's graph
for the facts (edges) that bear on the caller's latest words and adds them after
the caller's own facts; exact exchanges, facts and summaries come from the outbox,
because v4 documents no way to list a thread's messages or a graph's episodes with
their metadata. hosted.py does the rest. Routes and shapes are from the
``zep-cloud`` 4.0.1 SDK and help.getzep.com/v4/sdk-reference; method names follow SDK 4.x
(``user.create``, ``thread.create``, ``thread.add_messages``, ``graph.episode.add``,
``graph.search_edges``, ``user.delete``).

Caller ids -> users: v4 addresses users by server-assigned UUIDs; the caller is the
user's external ``user_id`` = ``lkmem:`` + the caller id (v4 allows 500 characters
[ZEP-SDK4 types/user.py]; no character rule is documented), found again with
``POST /users/lookup``. UUIDs of users and threads are kept in the outbox file.

Idempotency: every create and add sends an ``Idempotency-Key`` derived from the item
(and the messages not yet sent), so Zep answers a retry with the first result; the
outbox also remembers which messages of an exchange Zep already has, and sends
only the new ones (a reply that arrives after its turn was delivered).

Erasures: no mark of one is kept at Zep (``Service.mark_erased`` does nothing): v4
documents no place to keep and read back a time once the user is deleted (user
metadata is not documented in lookups), so an erasure reaches only the worker
processes that share the outbox file; another machine's live call learns of it only
when Zep's delete has emptied what recall reads.

Not in v4's documented routes (used by analogy with v3's ``DELETE /threads/{id}``
and ``DELETE /graph/episodes/{uuid}``, unverified): deleting a thread (forgetting a
call; Zep cannot delete one message, so forgetting one exchange deletes its call's
thread) and deleting an episode (forgetting a fact or summary).
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from .errors import InvalidFactError
from .facts import normalise_fact
from .hosted import (
    DELIVERY_TIMEOUT,
    Item,
    Service,
    ServiceRejectedError,
    ServiceUnavailableError,
    open_hosted,
    path,
)
from .limits import MAX_FACT_VALUE_CHARS

MAX_MESSAGE_CHARS = 4096
"""Longest message content Zep accepts [ZEP-REPO limits.py]; longer turns are cut
for Zep (the outbox keeps them whole)."""
MAX_EPISODE_CHARS = 10_000
SEARCH_PAGE = 10
"""Edges asked for per recall."""


def open_store(url: str):
    """Open the store a ``zep:`` URL names (hosted.open_hosted: no network yet).
    Raises InvalidStoreUrlError (bad URL, ZEP_API_KEY unset) or
    StoreUnavailableError (outbox file unusable)."""
    return open_hosted(url, Zep)


def user_id(caller_id: str) -> str:
    """The caller's external Zep ``user_id`` (see the module docstring)."""
    return "lkmem:" + caller_id


def idempotency_key(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def messages_of(item: Item) -> list[dict[str, Any]]:
    """An exchange as Zep thread messages: the caller's turn (none in a call's
    opening, the agent's greeting alone), then each reply."""
    d = item.data
    said = [("user", "caller", d["user_text"])] if d["user_text"] else []
    said += [
        ("assistant", "agent", line) for line in d["assistant_text"].split("\n") if line
    ]
    return [
        {
            "role": role,
            "name": name,
            "content": text[:MAX_MESSAGE_CHARS],
            "metadata": {"lkm_id": item.id},
        }
        for role, name, text in said
    ]


class Zep(Service):
    name = "Zep"
    scheme = "zep"
    default_host = "api.getzep.com"
    base_path = "/api/v4"
    key_env = "ZEP_API_KEY"
    auth_scheme = "Api-Key"
    lists_items = False

    # -- users and threads --

    async def user_uuid(self, caller_id: str, *, create: bool) -> str | None:
        """The caller's Zep user UUID: kept, looked up, or (``create``) made."""
        known = await self.ids.get(caller_id, "user")
        if known:
            return known
        found = await self.http.call(
            "POST",
            path("users", "lookup"),
            json={"user_id": user_id(caller_id)},
            ok=(404,),
        )
        if not (found or {}).get("uuid") and create:
            try:
                found = await self.http.call(
                    "POST",
                    path("users"),
                    json={"user_id": user_id(caller_id)},
                    headers={"Idempotency-Key": idempotency_key("user", caller_id)},
                    timeout=DELIVERY_TIMEOUT,
                )
            except ServiceRejectedError as exc:  # made meanwhile by another worker
                if exc.status not in (400, 409):
                    raise
                found = await self.http.call(
                    "POST",
                    path("users", "lookup"),
                    json={"user_id": user_id(caller_id)},
                )
        if not (found or {}).get("uuid"):
            return None
        await self.ids.set(caller_id, "user", found["uuid"])
        return found["uuid"]

    async def ensure_user(self, caller_id: str) -> str:
        """The caller's user UUID, the user made if it is new."""
        user = await self.user_uuid(caller_id, create=True)
        if user is None:
            raise ServiceUnavailableError("Zep answered without a user uuid")
        return user

    async def thread_uuid(self, caller_id: str, call_id: str) -> str:
        """The call's thread, made on its first exchange (``thread.create``)."""
        name = f"thread:{call_id}"
        known = await self.ids.get(caller_id, name)
        if known:
            return known
        user = await self.ensure_user(caller_id)
        thread = await self.http.call(
            "POST",
            path("threads"),
            json={"user_uuid": user},
            headers={"Idempotency-Key": idempotency_key("thread", caller_id, call_id)},
            timeout=DELIVERY_TIMEOUT,
        )
        await self.ids.set(caller_id, name, thread["uuid"])
        return thread["uuid"]

    # -- writes --

    async def put(self, item: Item, attempts: int) -> dict[str, Any]:
        if item.kind == "exchange":
            return await self.add_messages(item)
        return await self.add_episode(item)

    async def add_messages(self, item: Item) -> dict[str, Any]:
        """``thread.add_messages``: POST /threads/{uuid}/messages, only the messages
        Zep does not have yet. 202 {messages, task}."""
        thread = await self.thread_uuid(item.caller_id, item.call_id)
        sent = list(item.remote.get("sent", []))
        new = [m for m in messages_of(item) if m["content"] not in sent]
        if new:
            await self.http.call(
                "POST",
                path("threads", thread, "messages"),
                json={"messages": new},
                headers={
                    "Idempotency-Key": idempotency_key(
                        item.id, *sent, *(m["content"] for m in new)
                    )
                },
                timeout=DELIVERY_TIMEOUT,
            )
        return {"thread": thread, "sent": sent + [m["content"] for m in new]}

    async def add_episode(self, item: Item) -> dict[str, Any]:
        """``graph.episode.add``: POST /graphs/{user uuid}/episodes; the episode of the
        previous version (a fact's old value) is deleted. 202 {episode, task}."""
        graph = await self.ensure_user(item.caller_id)
        text = item.text()[:MAX_EPISODE_CHARS]
        answer = await self.http.call(
            "POST",
            path("graphs", graph, "episodes"),
            json={
                "data": text,
                "type": "text",
                "source_description": item.kind,
                "metadata": {"lkm_id": item.id},
            },
            headers={"Idempotency-Key": idempotency_key(item.id, text)},
            timeout=DELIVERY_TIMEOUT,
        )
        episode = answer["episode"]["uuid"]
        old = item.remote.get("episode")
        if old and old != episode:
            await self._delete_episode(graph, old)
        return {"episode": episode}

    # -- reads --

    async def search(self, caller_id: str, query: str, limit: int) -> list[Item]:
        """``graph.search_edges``: the facts Zep extracted that match ``query``, as fact
        items (kind from the edge's name); edges no longer valid are left out.
        Answer ``{items: [edge], next_cursor?}``; edge = {uuid, fact, name,
        created_at, invalid_at?, expired_at?, ...} (shape unverified for v4)."""
        graph = await self.user_uuid(caller_id, create=False)
        if graph is None:
            return []  # nothing was ever stored for this caller
        answer = await self.http.call(
            "POST",
            path("graphs", graph, "search", "edges"),
            params={"page_size": SEARCH_PAGE},
            json={"query": query[:400]},
        )
        found = []
        for edge in answer.get("items") or answer.get("edges") or []:
            if edge.get("invalid_at") or edge.get("expired_at"):
                continue
            try:
                kind, value = normalise_fact(
                    edge.get("name", "fact"), edge.get("fact", "")
                )
                at = datetime.fromisoformat(edge["created_at"]).timestamp()
            except (InvalidFactError, KeyError, TypeError, ValueError):
                continue
            data = {
                "kind": kind,
                "value": value[:MAX_FACT_VALUE_CHARS],
                "updated_at": at,
            }
            found.append(
                Item(f"zep-edge-{edge['uuid']}", caller_id, "fact", "", at, data)
            )
        return found

    async def listing(self, caller_id: str, kinds: tuple[str, ...]) -> None:
        return None  # v4 documents no listing of messages or episodes with metadata

    # -- deletes --

    async def delete(
        self, caller_id: str, items: list[tuple[str, dict[str, Any]]]
    ) -> None:
        """A forgotten exchange deletes its call's thread; a fact or summary its
        episode. 404 = already gone."""
        graph = await self.user_uuid(caller_id, create=False)
        threads = {r["thread"] for _, r in items if r.get("thread")}
        # an exchange whose delivery was not confirmed (Zep may have carried it out
        # after the kit gave up): its call's thread, as this outbox keeps it
        for call_id in {r["lkm_call"] for _, r in items if r.get("lkm_call")}:
            threads.add(await self.ids.get(caller_id, f"thread:{call_id}") or "")
        for thread in sorted(threads - {""}):
            await self.http.call(
                "DELETE", path("threads", thread), ok=(404,), timeout=DELIVERY_TIMEOUT
            )
        for _, remote in items:
            if remote.get("episode") and graph:
                await self._delete_episode(graph, remote["episode"])

    async def _delete_episode(self, graph: str, episode: str) -> None:
        await self.http.call(
            "DELETE",
            path("graphs", graph, "episodes", episode),
            ok=(404,),
            timeout=DELIVERY_TIMEOUT,
        )

    async def delete_caller(self, caller_id: str) -> None:
        """``user.delete``: DELETE /users/{uuid}; 202 {task}: threads, messages and the
        graph go when the task completes (the outbox hides them meanwhile)."""
        user = await self.user_uuid(caller_id, create=False)
        if user is not None:
            await self.http.call(
                "DELETE", path("users", user), ok=(404,), timeout=DELIVERY_TIMEOUT
            )
