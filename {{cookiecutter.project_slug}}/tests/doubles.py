"""Test doubles over the store interface (memory.MemoryStore), never over a backend.

- ``InMemoryStore``: a whole store in dicts, for tests of the core that need no
  database (it also runs the store contract suite, so it behaves like a real one);
- wrappers around any store: ``Counting`` (counts calls), ``Slow`` (waits first),
  ``Failing`` (raises, always, the first N times, or when a condition holds).

A wrapper forwards every method of the interface to the store it wraps, so the same
double works over SQLite, PostgreSQL or a hosted service's fake.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import memory
from memory import outbox_threads

METHODS = {
    name
    for name, value in vars(memory.MemoryStore).items()
    if callable(value) and not name.startswith("_")
}


class InMemoryStore:
    """memory.MemoryStore in dicts: exchanges ranked by how many query words they
    share with the caller's words (a stand-in for full-text search)."""

    def __init__(self) -> None:
        self._exchanges: dict[str, memory.Exchange] = {}
        self._facts: dict[
            str, list[memory.Fact]
        ] = {}  # caller id -> values, history too
        self._summaries: dict[tuple[str, str], memory.Summary] = {}
        self._erased: dict[str, float] = {}  # caller id ('' every caller) -> when
        self.closed = False

    def _check(self) -> None:
        if self.closed:
            raise memory.StoreUnavailableError("the memory store is closed")

    async def save(self, exchange: memory.Exchange) -> None:
        self._check()
        if exchange.created_at > await self.erased_at(exchange.caller_id):
            self._exchanges[exchange.key] = exchange

    async def erased_at(self, caller_id: str) -> float:
        self._check()
        return max(self._erased.get(caller_id, 0.0), self._erased.get("", 0.0))

    async def remember(
        self,
        caller_id: str,
        fact: memory.Fact,
        *,
        timeout: float = memory.WRITE_TIMEOUT,
    ) -> memory.Remembered:
        self._check()
        rows = self._facts.setdefault(caller_id, [])
        held = [f for f in rows if f.kind == fact.kind and f.replaced_at is None]
        change = memory.reconcile(held, fact)
        for old in change.retire:
            rows[rows.index(old)] = dataclasses.replace(
                old, replaced_at=fact.updated_at
            )
        if change.confirm is not None:
            same = next(f for f in held if f.value == change.confirm.value)
            rows[rows.index(same)] = change.confirm
        if change.add is not None:
            rows.append(change.add)
        return change.remembered

    async def save_summary(self, caller_id: str, call_id: str, text: str) -> None:
        self._check()
        self._summaries[(caller_id, call_id)] = memory.Summary(
            call_id, text, time.time()
        )

    async def forget(
        self,
        caller_id: str,
        *,
        kind: str | None = None,
        value: str | None = None,
        call_id: str | None = None,
        timeout: float = memory.WRITE_TIMEOUT,
    ) -> int:
        self._check()
        if kind is not None:
            rows = self._facts.get(caller_id, [])
            gone_facts = memory.facts.matching_facts(rows, kind, value)
            self._facts[caller_id] = [f for f in rows if f not in gone_facts]
            return len(gone_facts)
        gone = [k for k, e in self._exchanges.items() if e.caller_id == caller_id]
        gone = [
            k for k in gone if call_id is None or self._exchanges[k].call_id == call_id
        ]
        summaries = [k for k in self._summaries if k[0] == caller_id]
        summaries = [k for k in summaries if call_id is None or k[1] == call_id]
        facts = self._facts.pop(caller_id, []) if call_id is None else []
        if call_id is None:
            self._erased[caller_id] = time.time()
        for k in gone:
            del self._exchanges[k]
        for s in summaries:
            del self._summaries[s]
        return len(gone) + len(summaries) + len(facts)

    async def history(self, caller_id: str) -> list[memory.Fact]:
        self._check()
        old = [f for f in self._facts.get(caller_id, []) if f.replaced_at is not None]
        return sorted(old, key=lambda f: f.replaced_at or 0.0, reverse=True)

    async def profile(self, caller_id: str) -> memory.Recall:
        self._check()
        facts = sorted(
            (f for f in self._facts.get(caller_id, []) if f.replaced_at is None),
            key=lambda f: f.updated_at,
            reverse=True,
        )
        summaries = sorted(
            (s for (c, _), s in self._summaries.items() if c == caller_id),
            key=lambda s: s.created_at,
            reverse=True,
        )[: memory.RECENT_SUMMARIES]
        return memory.Recall(tuple(facts), tuple(summaries))

    async def recall(
        self,
        caller_id: str,
        query: str,
        *,
        limit: int = memory.RECALL_EXCHANGES,
        exclude_call_id: str | None = None,
    ) -> memory.Recall:
        profile = await self.profile(caller_id)
        words = {w for w in re.findall(r"\w+", query.lower()) if len(w) > 3}
        scored = []
        for e in self._exchanges.values():
            if e.caller_id != caller_id or e.call_id == exclude_call_id:
                continue
            text = set(re.findall(r"\w+", f"{e.user_text} {e.assistant_text}".lower()))
            if score := len(words & text):
                scored.append((-score, e.created_at, e))
        best = tuple(e for *_, e in sorted(scored, key=lambda s: s[:2])[:limit])
        return memory.Recall(profile.facts, profile.summaries, best)

    async def exchanges(
        self, caller_id: str, *, call_id: str | None = None
    ) -> list[memory.Exchange]:
        self._check()
        rows = [
            e
            for e in self._exchanges.values()
            if e.caller_id == caller_id and (call_id is None or e.call_id == call_id)
        ]
        return sorted(rows, key=lambda e: e.created_at)

    async def summaries(self, caller_id: str) -> list[memory.Summary]:
        self._check()
        found = [s for (c, _), s in self._summaries.items() if c == caller_id]
        return sorted(found, key=lambda s: s.created_at, reverse=True)

    async def callers(self, *, after: str = "", limit: int = 100) -> list[str]:
        self._check()
        ids = {e.caller_id for e in self._exchanges.values()}
        ids |= {c for c, rows in self._facts.items() if rows} | {
            c for c, _ in self._summaries
        }
        return sorted(c for c in ids if c > after)[:limit]

    async def purge(self, *, before: float, what: str) -> int:
        self._check()
        if what not in memory.PURGEABLE:
            raise ValueError(f"what must be one of {', '.join(memory.PURGEABLE)}")
        if what == "facts":
            n = 0
            for caller_id, rows in self._facts.items():
                self._facts[caller_id] = [f for f in rows if f.updated_at >= before]
                n += len(rows) - len(self._facts[caller_id])
            return n
        tables: dict[str, dict[Any, Any]] = {
            "exchanges": self._exchanges,
            "summaries": self._summaries,
        }
        table = tables[what]
        if what == "exchanges":
            self._erased[""] = max(self._erased.get("", 0.0), before)
        old = [k for k, v in table.items() if v.created_at < before]
        for k in old:
            del table[k]
        return len(old)

    async def stats(self) -> dict[str, int]:
        self._check()
        return {
            "callers": len(await self.callers(limit=10**9)),
            "exchanges": len(self._exchanges),
            "facts": sum(len(rows) for rows in self._facts.values()),
            "summaries": len(self._summaries),
        }

    async def close(self) -> None:
        self.closed = True


class StoreWrapper:
    """Forwards every memory.MemoryStore method to ``inner`` through ``around``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in METHODS:
            return attr

        async def method(*args: Any, **kwargs: Any) -> Any:
            return await self.around(name, attr, args, kwargs)

        return method

    async def around(
        self, name: str, method: Callable[..., Any], args: tuple, kwargs: dict
    ) -> Any:
        return await method(*args, **kwargs)


class Counting(StoreWrapper):
    """Counts calls per method: ``store.calls["recall"]``; ``store.queries`` lists
    what each recall searched for, in order."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.calls: collections.Counter[str] = collections.Counter()
        self.queries: list[str] = []

    async def around(self, name, method, args, kwargs):
        self.calls[name] += 1
        if name == "recall":
            self.queries.append(kwargs.get("query", args[1] if len(args) > 1 else ""))
        return await method(*args, **kwargs)


class Slow(StoreWrapper):
    """Makes the named methods wait ``seconds``, or until ``gate`` is set (a gate never
    set: a store that never answers)."""

    def __init__(
        self,
        inner: Any,
        *methods: str,
        seconds: float = 0.0,
        gate: asyncio.Event | None = None,
    ) -> None:
        super().__init__(inner)
        self.methods, self.seconds, self.gate = set(methods), seconds, gate

    async def around(self, name, method, args, kwargs):
        if name in self.methods:
            if self.gate is not None:
                await self.gate.wait()
            await asyncio.sleep(self.seconds)
        return await method(*args, **kwargs)


class Failing(StoreWrapper):
    """Makes the named methods raise ``error``: always, the first ``times`` calls only
    (a flaky store), or only for calls whose arguments ``when(*args)`` accepts."""

    def __init__(
        self,
        inner: Any,
        *methods: str,
        error: Exception | None = None,
        times: int | None = None,
        when: Callable[..., bool] | None = None,
    ) -> None:
        super().__init__(inner)
        self.methods = set(methods)
        self.error = error or memory.StoreUnavailableError(
            "the store is down (test double)"
        )
        self.times, self.when = times, when
        self.failed = 0

    async def around(self, name, method, args, kwargs):
        wanted = name in self.methods and (self.when is None or self.when(*args))
        if wanted and (self.times is None or self.failed < self.times):
            self.failed += 1
            raise self.error
        return await method(*args, **kwargs)


def make_exchange(
    n: int,
    caller: str = "alice@example.com",
    text: str | None = None,
    call_id: str = "call-1",
    *,
    reply: str = "ok",
    at: float | None = None,
) -> memory.Exchange:
    """Exchange number ``n`` of a caller, keyed as CallMemory keys it."""
    return memory.Exchange(
        key=memory.exchange_key(caller, f"item_{n}"),
        caller_id=caller,
        call_id=call_id,
        user_text=text or f"turn {n}",
        assistant_text=reply,
        item_ids=(f"item_{n}",),
        created_at=time.time() + n * 1e-3 if at is None else at,
    )


def counting_syncs(monkeypatch) -> list[str]:
    """Every fsync of an outbox file (``outbox_threads.sync_wal``), by its name."""
    synced: list[str] = []
    sync = outbox_threads.sync_wal

    def counted(path: Path) -> None:
        sync(path)
        synced.append(path.name)

    monkeypatch.setattr(outbox_threads, "sync_wal", counted)
    return synced
