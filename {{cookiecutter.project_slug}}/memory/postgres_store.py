"""The shared memory store: a PostgreSQL server that workers on many machines reach.

``MEMORY_URL=postgresql://user:password@host:5432/dbname?schema=livekit_memory&tenant=acme``:
any libpq URL, plus ``schema`` (default ``livekit_memory``) and ``tenant`` (default
``default``). Every row carries the tenant and the caller id, and every query is scoped
to both. Search ranks single turns, as the SQLite store does (``postgres_search``):
each side of an exchange is a row of ``turns`` with the words around it and its day,
in a ``tsvector`` whose lexemes carry the caller's prefix, so its GIN index keeps one
list per caller and word; the turns found are ranked by BM25 over the caller's own
turns, from word counts that triggers on the exchanges table keep. Implements
``MemoryStore`` (``store``); ``records`` and ``facts`` have the types and rules.

Workers never create or change the schema. An operator does, with this module
(the command is ``postgres_admin``'s, the schema ``postgres_schema``'s and its
migrations ``postgres_migrations``'s):

    uv run -m memory.postgres_store status     # the schema's version against this code's
    uv run -m memory.postgres_store sql        # the SQL `upgrade` would run, to review
    uv run -m memory.postgres_store upgrade    # create or upgrade (safe from many places at once)
    uv run -m memory.postgres_store sql --app-role NAME   # a login role held to this tenant
    uv run -m memory.postgres_store check      # is tenant isolation in force for MEMORY_URL?

A worker whose server is down, or whose schema is missing or at another version, logs
it once and takes calls without memory until that is fixed.

Driver: psycopg 3 and its pool. libpq reads the URL, so every libpq setting works
(sslmode, PGPASSWORD, ~/.pgpass); a cancelled task cancels its query on the server;
and the same driver runs the operator commands, synchronously. This module is the
store's operations; ``postgres_pool`` runs them on the server within their bounds,
and ``postgres_search`` has the search words and the ranking SQL.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

# psycopg is installed only where this backend is used (``psycopg[binary,pool]``);
# elsewhere a type checker reads these names as Any instead of failing the folder.
import psycopg  # type: ignore[import-not-found, unused-ignore]

from .facts import Fact, Remembered, matching_facts, reconcile
from .limits import RECALL_EXCHANGES, RECENT_SUMMARIES, WRITE_TIMEOUT
from .places import spool_in_data_dir
from .postgres_pool import POOL_SIZE, READ_TIMEOUT, SAVE_TIMEOUT, Pool
from .postgres_schema import (
    CONNECT_TIMEOUT,
    MIGRATIONS,
    SCHEMA_VERSION,
    SEARCH_INDEXES,
    TABLES,
    Target,
    upgrade,
    upgrade_sql,
)
from .postgres_search import (
    EXCHANGE,
    caller_prefix,
    exchange_words,
    pick,
    query_lexemes,
    row_exchange,
    search_args,
    search_sql,
)
from .records import Exchange, Recall, Summary
from .store import PURGEABLE
from .words import whose_turns

# What other code reads here by name (tests, benchmarks, the operator's command):
# the schema's, the pool's and the search's own names live in their modules, and
# are patched there.
__all__ = [
    "CONNECT_TIMEOUT",
    "MIGRATIONS",
    "POOL_SIZE",
    "PURGE_TIMEOUT",
    "READ_TIMEOUT",
    "SCHEMA_VERSION",
    "SEARCH_INDEXES",
    "TABLES",
    "PostgresStore",
    "Target",
    "open_store",
    "upgrade",
    "upgrade_sql",
]

PURGE_TIMEOUT = 600.0
"""Seconds a purge (an operator's retention job) may take."""
QUERIES = {
    "facts": "SELECT kind, value, updated_at, learned_at, replaced_at FROM {s}.facts"
    " WHERE tenant = %(t)s AND caller_id = %(c)s AND replaced_at IS NULL"
    " ORDER BY updated_at DESC",
    "history": "SELECT kind, value, updated_at, learned_at, replaced_at FROM {s}.facts"
    " WHERE tenant = %(t)s AND caller_id = %(c)s AND replaced_at IS NOT NULL"
    " ORDER BY replaced_at DESC",
    "kind": "SELECT kind, value, updated_at, learned_at, replaced_at FROM {s}.facts"
    " WHERE tenant = %(t)s AND caller_id = %(c)s AND kind = %(kind)s",
    # one caller's facts are reconciled one write at a time, across worker processes
    "lock caller": "SELECT pg_advisory_xact_lock(hashtextextended(%(t)s || '/' || %(c)s, 0))",
    "summaries": "SELECT call_id, text, created_at FROM {s}.summaries"
    " WHERE tenant = %(t)s AND caller_id = %(c)s ORDER BY created_at DESC LIMIT %(n)s",
    "exchanges": f"SELECT {EXCHANGE} FROM {{s}}.exchanges"
    " WHERE tenant = %(t)s AND caller_id = %(c)s"
    " AND (%(call)s::text IS NULL OR call_id = %(call)s) ORDER BY created_at, seq",
    "save": "INSERT INTO {s}.exchanges (tenant, caller_id, key, call_id, user_text,"
    " assistant_text, interrupted, item_ids, created_at, user_words, reply_words,"
    " day_words) VALUES (%(t)s, %(c)s, %(key)s, %(call)s, %(user)s, %(reply)s,"
    " %(cut)s, %(items)s, %(at)s, %(uw)s, %(rw)s, %(dw)s)"
    " ON CONFLICT (tenant, caller_id, key) DO UPDATE SET user_text = excluded.user_text,"
    " assistant_text = excluded.assistant_text, interrupted = excluded.interrupted,"
    " item_ids = excluded.item_ids, user_words = excluded.user_words,"
    " reply_words = excluded.reply_words"
    # a retried save of the same version writes nothing (no new row version to index)
    " WHERE (exchanges.user_text, exchanges.assistant_text, exchanges.interrupted,"
    " exchanges.item_ids) IS DISTINCT FROM (excluded.user_text, excluded.assistant_text,"
    " excluded.interrupted, excluded.item_ids)",
    "add fact": "INSERT INTO {s}.facts (tenant, caller_id, kind, value, updated_at, learned_at)"
    " VALUES (%(t)s, %(c)s, %(kind)s, %(v)s, %(at)s, %(learned)s)",
    "retire fact": "UPDATE {s}.facts SET replaced_at = %(at)s WHERE tenant = %(t)s"
    " AND caller_id = %(c)s AND kind = %(kind)s AND value = %(v)s AND replaced_at IS NULL",
    "confirm fact": "UPDATE {s}.facts SET updated_at = %(at)s WHERE tenant = %(t)s"
    " AND caller_id = %(c)s AND kind = %(kind)s AND value = %(v)s AND replaced_at IS NULL",
    "forget values": "DELETE FROM {s}.facts WHERE tenant = %(t)s AND caller_id = %(c)s"
    " AND kind = %(kind)s AND value = ANY(%(vs)s)",
    "summary": "INSERT INTO {s}.summaries VALUES (%(t)s, %(c)s, %(call)s, %(v)s, %(at)s)"
    " ON CONFLICT (tenant, caller_id, call_id) DO UPDATE SET text = excluded.text",
    # a data-modifying WITH put before a DELETE, so its row count stays the DELETE's
    # a forget's time is the server's clock (at NULL), so workers on machines whose
    # clocks differ compare their calls' turns with one clock (``erased_at``)
    "mark erased": "WITH mark AS (INSERT INTO {s}.erasures VALUES (%(t)s, %(c)s,"
    " coalesce(%(at)s::double precision, extract(epoch FROM clock_timestamp())))"
    " ON CONFLICT (tenant, caller_id) DO UPDATE"
    " SET erased_at = greatest(erasures.erased_at, excluded.erased_at)) ",
    "erased at": "SELECT max(erased_at), extract(epoch FROM clock_timestamp())"
    " FROM {s}.erasures WHERE tenant = %(t)s"
    " AND caller_id IN (%(c)s, '')",
    "callers": "SELECT caller_id FROM {s}.exchanges WHERE tenant = %(t)s"
    " UNION SELECT caller_id FROM {s}.facts WHERE tenant = %(t)s"
    " UNION SELECT caller_id FROM {s}.summaries WHERE tenant = %(t)s",
}


def open_store(url: str) -> PostgresStore:
    """Open the store a ``postgresql:`` URL names; synchronous, for prewarm.

    Raises ``InvalidStoreUrlError`` for a bad URL, and nothing for a server that is down or
    a schema that is missing or at another version: that is logged once (finding out
    takes at most ``CONNECT_TIMEOUT`` s) and the store refuses work until it is fixed,
    so calls go on without memory. Its connections open on first use, in the call's
    event loop (prewarm has none)."""
    store = PostgresStore(Target(url))
    store._pool.check_now()
    return store


class PostgresStore:
    """The shared store; ``MemoryStore`` says what each method promises.

    One per worker process, opened by ``open_store`` and shared by its calls. Raises
    ``StoreUnavailableError`` when the server, the pool or the schema cannot be used now or
    a time bound ran out, ``SchemaMismatchError``, and psycopg errors."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._sql = {name: sql.format(s=target.schema) for name, sql in QUERIES.items()}
        self._pool = Pool(target)  # how the work runs: in order, within bounds

    @property
    def spool_path(self) -> Path:
        """This store's spool file (spool.py): in the data folder, one per server,
        database, schema and tenant."""
        return spool_in_data_dir(self.target.where, self.target.tenant)

    # -- writes --

    async def save(self, exchange: Exchange) -> None:
        e = exchange
        args = _save_args(self.target.tenant, e)
        await self._pool.write(e.caller_id, [(self._sql["save"], args)], "a save")

    async def save_many(self, exchanges: list[Exchange]) -> None:
        """Save one caller's ``exchanges`` in one transaction and one round trip
        (psycopg's ``executemany`` pipelines the statements): all or none, within
        ``SAVE_TIMEOUT`` (the spool's delivery, a backlog after an outage)."""
        if not exchanges:
            return
        caller_id = exchanges[0].caller_id
        rows = [_save_args(self.target.tenant, e) for e in exchanges]

        async def batch(conn: psycopg.AsyncConnection, scope: dict) -> int:
            async with conn.cursor() as cursor:
                await cursor.executemany(
                    self._sql["save"], [{**scope, **r} for r in rows]
                )
                return len(rows)

        await self._pool.write(caller_id, batch, "a batch of saves", SAVE_TIMEOUT)

    async def remember(
        self, caller_id: str, fact: Fact, *, timeout: float = WRITE_TIMEOUT
    ) -> Remembered:
        async def reconciled(conn: psycopg.AsyncConnection, scope: dict) -> Remembered:
            # read and write in one transaction, under the caller's lock
            await conn.execute(self._sql["lock caller"], scope)
            found = await conn.execute(self._sql["kind"], {**scope, "kind": fact.kind})
            held = [
                f
                for f in (Fact(*r) for r in await found.fetchall())
                if f.replaced_at is None
            ]
            change = reconcile(held, fact)
            writes = [("retire fact", f, fact.updated_at) for f in change.retire]
            if change.confirm is not None:
                writes.append(
                    ("confirm fact", change.confirm, change.confirm.updated_at)
                )
            if change.add is not None:
                writes.append(("add fact", change.add, change.add.updated_at))
            for sql, f, at in writes:
                args = {"kind": f.kind, "v": f.value, "at": at, "learned": f.learned_at}
                await conn.execute(self._sql[sql], {**scope, **args})
            return change.remembered

        return await self._pool.write(caller_id, reconciled, "a fact", timeout)

    async def save_summary(self, caller_id: str, call_id: str, text: str) -> None:
        args = {"call": call_id, "v": text, "at": time.time()}
        await self._pool.write(caller_id, [(self._sql["summary"], args)], "a summary")

    async def forget(
        self,
        caller_id: str,
        *,
        kind: str | None = None,
        value: str | None = None,
        call_id: str | None = None,
        timeout: float = WRITE_TIMEOUT,
    ) -> int:
        if kind is not None and value is not None:

            async def matching(conn: psycopg.AsyncConnection, scope: dict) -> int:
                await conn.execute(self._sql["lock caller"], scope)
                found = await conn.execute(self._sql["kind"], {**scope, "kind": kind})
                facts = [Fact(*r) for r in await found.fetchall()]
                values = sorted({f.value for f in matching_facts(facts, kind, value)})
                gone = await conn.execute(
                    self._sql["forget values"], {**scope, "kind": kind, "vs": values}
                )
                return gone.rowcount

            return await self._pool.write(caller_id, matching, "forgetting", timeout)
        # Deleting a row deletes its index entries (the search index's included).
        if kind is not None:
            tables, only = ["facts"], " AND kind = %(kind)s"
        elif call_id is not None:
            tables, only = ["summaries", "exchanges"], " AND call_id = %(call)s"
        else:
            tables, only = list(TABLES), ""
        args = {"kind": kind, "call": call_id, "at": None}  # None: the server's now
        where = f"WHERE tenant = %(t)s AND caller_id = %(c)s{only}"
        deletes = [
            (f"DELETE FROM {self.target.schema}.{t} {where}", args) for t in tables
        ]
        if kind is None and call_id is None:  # in the same transaction: erased_at
            deletes[0] = (self._sql["mark erased"] + deletes[0][0], args)
        return await self._pool.write(caller_id, deletes, "forgetting", timeout)

    async def purge(self, *, before: float, what: str) -> int:
        if what not in PURGEABLE:
            raise ValueError(
                f"what must be one of {', '.join(PURGEABLE)}, not {what!r}"
            )
        column = "updated_at" if what == "facts" else "created_at"
        sql = f"DELETE FROM {self.target.schema}.{what} WHERE tenant = %(t)s AND {column} < %(b)s"
        if what == "exchanges":  # a live call's older words are not saved after it
            sql = self._sql["mark erased"] + sql
        return await self._pool.write(
            "", [(sql, {"b": before, "at": before})], "a purge", PURGE_TIMEOUT
        )

    async def erased_at(self, caller_id: str) -> float:
        """The caller's last erasure, marked by the server's clock, told by this
        process's: shifted by how far this machine's clock is from the server's (as
        measured by this query, to within its round trip)."""
        (row,) = await self._fetch(self._sql["erased at"], {"c": caller_id})
        if row[0] is None:
            return 0.0
        return float(row[0]) + (time.time() - float(row[1]))

    # -- reads --

    async def profile(self, caller_id: str) -> Recall:
        return await self.recall(caller_id, "", limit=0)

    async def recall(
        self,
        caller_id: str,
        query: str,
        *,
        limit: int = RECALL_EXCHANGES,
        exclude_call_id: str | None = None,
    ) -> Recall:
        # what was said is read once, in the call's event loop: linear, up to the limit
        prefix = caller_prefix(self.target.tenant, caller_id)
        lexemes = query_lexemes(prefix, query) if limit > 0 else []
        args = {"t": self.target.tenant, "c": caller_id, "x": exclude_call_id}
        search = search_sql(self.target.schema, len(lexemes))
        # whose words the question is about: by its pronouns only (the caller's name
        # fact, which sqlite reads first, comes in this same round trip)
        found = {**args, **search_args(lexemes, whose_turns(query))}

        async def work(conn: psycopg.AsyncConnection) -> Recall:
            async with conn.pipeline():  # the queries go in one round trip
                facts = await conn.execute(self._sql["facts"], args)
                summaries = await conn.execute(
                    self._sql["summaries"], {**args, "n": RECENT_SUMMARIES}
                )
                want = limit * 3
                turns = (
                    await conn.execute(search, {**found, "n": want})
                    if lexemes
                    else None
                )
            best: tuple[tuple[Exchange, ...], tuple[str, ...]] = ((), ())
            if turns is not None:
                rows = await turns.fetchall()
                best = pick([(r[0], row_exchange(r[1:])) for r in rows], limit)
                # the same words said again left fewer than limit exchanges: more
                while len(best[0]) < limit and len(rows) == want:
                    want *= 4
                    more = await conn.execute(search, {**found, "n": want})
                    rows = await more.fetchall()
                    best = pick([(r[0], row_exchange(r[1:])) for r in rows], limit)
            return Recall(
                tuple(Fact(*r) for r in await facts.fetchall()),
                tuple(Summary(*r) for r in await summaries.fetchall()),
                *best,
            )

        return await self._pool.read(work)

    async def history(self, caller_id: str) -> list[Fact]:
        return [
            Fact(*r) for r in await self._fetch(self._sql["history"], {"c": caller_id})
        ]

    async def exchanges(
        self, caller_id: str, *, call_id: str | None = None
    ) -> list[Exchange]:
        args = {"c": caller_id, "call": call_id}
        return [
            row_exchange(r) for r in await self._fetch(self._sql["exchanges"], args)
        ]

    async def summaries(self, caller_id: str) -> list[Summary]:
        args = {"c": caller_id, "n": None}  # LIMIT NULL: all of them
        return [Summary(*r) for r in await self._fetch(self._sql["summaries"], args)]

    async def callers(self, *, after: str = "", limit: int = 100) -> list[str]:
        # COLLATE "C": the byte order of ids, whatever the database's locale
        sql = (
            f"SELECT caller_id FROM ({self._sql['callers']}) c WHERE caller_id"
            ' COLLATE "C" > %(a)s ORDER BY caller_id COLLATE "C" LIMIT %(n)s'
        )
        return [r[0] for r in await self._fetch(sql, {"a": after, "n": limit})]

    async def stats(self) -> dict[str, int]:
        counts = [
            f"(SELECT count(*) FROM {self.target.schema}.{t} WHERE tenant = %(t)s)"
            for t in PURGEABLE
        ]
        sql = f"SELECT {', '.join(counts)}, (SELECT count(*) FROM ({self._sql['callers']}) c)"
        (row,) = await self._fetch(sql, {})
        return dict(zip((*PURGEABLE, "callers"), row, strict=True))

    async def close(self) -> None:
        await self._pool.close()

    async def _fetch(self, sql: str, args: dict) -> list[tuple]:
        async def work(conn: psycopg.AsyncConnection) -> list[tuple]:
            return await (
                await conn.execute(sql, {"t": self.target.tenant, **args})
            ).fetchall()

        return await self._pool.read(work)


def _save_args(tenant: str, e: Exchange) -> dict:
    return {
        "key": e.key,
        "call": e.call_id,
        "user": e.user_text,
        "reply": e.assistant_text,
        "cut": e.interrupted,
        "items": list(e.item_ids),
        "at": e.created_at,
        **exchange_words(tenant, e),  # what the turns are made of
    }


if __name__ == "__main__":  # uv run -m memory.postgres_store <command>
    from .postgres_admin import main

    sys.exit(main())
