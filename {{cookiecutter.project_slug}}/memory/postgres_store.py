"""The shared memory store: a PostgreSQL server that workers on many machines reach.

``MEMORY_URL=postgresql://user:password@host:5432/dbname?schema=livekit_memory&tenant=acme``:
any libpq URL, plus ``schema`` (default ``livekit_memory``) and ``tenant`` (default
``default``). Every row carries the tenant and the caller id, and every query is scoped
to both. Search is PostgreSQL's own: a ``tsvector`` column and a GIN index; Chinese,
Japanese, Korean and Thai text is searched by pairs of characters
(``search_words``) in a second ``tsvector`` the writes fill. What matches is
ranked by BM25 over the caller's own exchanges, from word counts that triggers on the
exchanges table keep. Implements ``MemoryStore``; memory.py has the types and
rules.

Workers never create or change the schema. An operator does, with this file:

    uv run -m memory.postgres_store status     # the schema's version against this code's
    uv run -m memory.postgres_store sql        # the SQL `upgrade` would run, to review
    uv run -m memory.postgres_store upgrade    # create or upgrade (safe from many places at once)
    uv run -m memory.postgres_store sql --app-role NAME   # a login role held to this tenant
    uv run -m memory.postgres_store check      # is tenant isolation in force for MEMORY_URL?

A worker whose server is down, or whose schema is missing or at another version, logs
it once and takes calls without memory until that is fixed.

Driver: psycopg 3 and its pool. libpq reads the URL, so every libpq setting works
(sslmode, PGPASSWORD, ~/.pgpass); a cancelled task cancels its query on the server;
and the same driver runs the operator commands, synchronously.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import sys
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

# psycopg is installed only where this backend is used (``psycopg[binary,pool]``);
# elsewhere a type checker reads these names as Any instead of failing the folder.
import psycopg  # type: ignore[import-not-found, unused-ignore]
from psycopg.conninfo import (  # type: ignore[import-not-found, unused-ignore]
    conninfo_to_dict,
)
from psycopg_pool import (  # type: ignore[import-not-found, unused-ignore]
    AsyncConnectionPool,
    PoolTimeout,
)

from .errors import InvalidStoreUrlError, SchemaMismatchError, StoreUnavailableError
from .facts import Fact, Remembered, matching_facts, reconcile
from .limits import RECALL_EXCHANGES, RECENT_SUMMARIES, WRITE_TIMEOUT
from .places import project_dir
from .records import Exchange, Recall, Summary
from .store import PURGEABLE
from .words import STOPWORDS, query_words, search_words, searched_by_pairs

T = TypeVar("T")
Work = Callable[[psycopg.AsyncConnection], Awaitable[T]]
logger = logging.getLogger("memory.postgres")

DEFAULT_URL = "postgresql://"
"""libpq's defaults: the PG* environment variables (PGHOST, PGDATABASE, PGUSER...)."""
DEFAULT_SCHEMA = "livekit_memory"
DEFAULT_TENANT = "default"
POOL_SIZE = 4
"""Connections per worker process, at most. LiveKit runs each call in its own process;
its preload, recalls and background saves need a few. The server needs
max_connections >= processes per machine x machines x POOL_SIZE."""
CONNECT_TIMEOUT = 3  # seconds (libpq's least is 2)
READ_TIMEOUT = 1.0
"""Seconds a read may take. A reply stops waiting after RECALL_BUDGET; this
bounds the work left behind, so slow queries cannot pile up on the pool."""
SAVE_TIMEOUT = 5.0
"""Seconds one exchange or summary save may take (ExchangeWriter retries)."""
PURGE_TIMEOUT = 600.0
"""Seconds a purge (an operator's retention job) may take."""
STATEMENT_TIMEOUT = 5.0
"""The server stops any statement of ours after this, even if we are gone."""
COMMIT_MARGIN = 0.1
"""A write bounded by a timeout sends COMMIT only while this much time is left."""
RECHECK_AFTER = 30.0
"""Seconds before a missing or mismatched schema is looked at again."""

MAX_QUERY_TERMS = 24
K1, B = 1.2, 0.75
"""BM25's term-frequency saturation and length normalization (the usual values)."""


def query_terms(text: str) -> list[str]:
    """The content words of what the caller said, lower-cased, at most
    ``MAX_QUERY_TERMS``. A word is a run of letters and digits, so nothing the caller
    says is read as tsquery syntax."""
    terms: list[str] = []
    for word in re.findall(r"[^\W_]+", text.lower()):
        if word not in STOPWORDS and len(word) > 1 and word not in terms:
            terms.append(word)
    return terms[:MAX_QUERY_TERMS]


def tsquery(text: str) -> str | None:
    """What the caller said as a ``to_tsquery`` argument: its ``query_terms``, each
    quoted, joined by ``|`` (OR). None when nothing is left to search for."""
    return " | ".join(f"'{t}'" for t in query_terms(text)) or None


# PostgreSQL's parser keeps a run of Chinese, Japanese or Thai characters, or a Korean
# word with its particle, as one token, so "上海出差" is never found in "下周二我要去上海出差".
# Those scripts are searched by search_words' character pairs instead, kept
# in the `pairs` column as a tsvector literal: its lexemes are taken as they are,
# whatever the server's locale or text search configuration.


def pair_vector(text: str) -> str | None:
    """The ``pairs`` column for ``text``: its character pairs (``search_words``
    of Chinese, Japanese, Korean and Thai), each at its position, as a ``tsvector``
    literal. None when there are none (most turns)."""
    words = search_words(text) if not text.isascii() else []
    found = [
        f"{_lexeme(w)}:{n}" for n, w in enumerate(words, 1) if searched_by_pairs(w)
    ]
    return " ".join(found) or None


def query_pairs(text: str) -> list[str]:
    """The character pairs of what the caller said (``query_words``)."""
    return [w for w in query_words(text) if searched_by_pairs(w)]


def pair_query(text: str) -> str | None:
    """What the caller said as a ``tsquery`` literal over the ``pairs`` column: its
    ``query_pairs`` joined by ``|``. None when there are none."""
    return " | ".join(_lexeme(w) for w in query_pairs(text)) or None


def _lexeme(word: str) -> str:
    return "'" + word.replace("\\", "\\\\").replace("'", "''") + "'"


def _index_pairs(conn: psycopg.Connection, s: str) -> None:
    """Fill the pairs column of the exchanges saved before it existed."""
    # Only rows with non-ASCII text can have pairs; they are read in batches
    # (a server-side cursor) so a large table is not held in memory.
    with conn.cursor(name="pairs_to_index") as rows, conn.cursor() as update:
        rows.execute(
            f"SELECT tenant, caller_id, key, user_text || ' ' || assistant_text"
            f" FROM {s}.exchanges WHERE (user_text || assistant_text) ~ '[^[:ascii:]]'"
        )
        while batch := rows.fetchmany(1000):
            update.executemany(
                f"UPDATE {s}.exchanges SET pairs = %s::tsvector"
                " WHERE tenant = %s AND caller_id = %s AND key = %s",
                [
                    (v, *row[:3])
                    for row in batch
                    if (v := pair_vector(row[3])) is not None
                ],
            )


# Each entry takes a schema ({s}) from version N to N+1; {s}.schema_version holds N:
# SQL, or SQL and then a function (connection, schema) for a step that needs Python.
# Append, never edit: databases in the field are at every version. Row-level security
# binds each role listed in {s}.tenant_roles to its tenant; owners and superusers are
# not bound (see `check`).
_OWN_TENANT = (
    "tenant = (SELECT tenant FROM {s}.tenant_roles WHERE role_name = current_user)"
)
MIGRATIONS: list[str | tuple[str, Callable[[psycopg.Connection, str], None]]] = [
    """
CREATE TABLE {s}.schema_version (version integer NOT NULL);
INSERT INTO {s}.schema_version VALUES (0);
CREATE TABLE {s}.exchanges (
    tenant         text NOT NULL,
    caller_id      text NOT NULL,
    key            text NOT NULL,
    seq            bigint GENERATED ALWAYS AS IDENTITY,  -- insertion order, for ties
    call_id        text NOT NULL,
    user_text      text NOT NULL,
    assistant_text text NOT NULL,
    interrupted    boolean NOT NULL,
    item_ids       text[] NOT NULL,
    created_at     double precision NOT NULL,  -- seconds since the epoch, as in memory.py
    search         tsvector GENERATED ALWAYS AS
                   (to_tsvector('english', user_text || ' ' || assistant_text)) STORED,
    PRIMARY KEY (tenant, caller_id, key)
);
CREATE INDEX exchanges_by_time ON {s}.exchanges (tenant, caller_id, created_at);
CREATE INDEX exchanges_search ON {s}.exchanges USING gin (search);
CREATE TABLE {s}.facts (
    tenant     text NOT NULL,
    caller_id  text NOT NULL,
    kind       text NOT NULL,
    value      text NOT NULL,
    updated_at double precision NOT NULL,
    PRIMARY KEY (tenant, caller_id, kind)
);
CREATE TABLE {s}.summaries (
    tenant     text NOT NULL,
    caller_id  text NOT NULL,
    call_id    text NOT NULL,
    text       text NOT NULL,
    created_at double precision NOT NULL,
    PRIMARY KEY (tenant, caller_id, call_id)
);
CREATE TABLE {s}.tenant_roles (role_name name PRIMARY KEY, tenant text NOT NULL);
"""
    + "".join(
        f"ALTER TABLE {{s}}.{t} ENABLE ROW LEVEL SECURITY;\n"
        f"CREATE POLICY own_tenant ON {{s}}.{t} USING ({_OWN_TENANT}) WITH CHECK ({_OWN_TENANT});\n"
        for t in ("exchanges", "facts", "summaries")
    ),
    # 2: facts keep dates and history, and a kind may hold several values
    # (reconcile decides which), so (tenant, caller_id, kind) is no longer unique.
    """
ALTER TABLE {s}.facts DROP CONSTRAINT facts_pkey;
ALTER TABLE {s}.facts ADD COLUMN learned_at double precision NOT NULL DEFAULT 0;
UPDATE {s}.facts SET learned_at = updated_at;
ALTER TABLE {s}.facts ADD COLUMN replaced_at double precision;  -- NULL: a current value
CREATE INDEX facts_by_caller ON {s}.facts (tenant, caller_id, kind);
""",
    # 3: Chinese, Japanese, Korean and Thai searched by character pairs (pair_vector),
    # which the writes compute; existing rows are indexed in Python (_index_pairs).
    (
        """
ALTER TABLE {s}.exchanges ADD COLUMN pairs tsvector;  -- NULL: no such text
CREATE INDEX exchanges_pairs ON {s}.exchanges USING gin (pairs);
""",
        _index_pairs,
    ),
    # 4: recall weighs each word by how rare it is in the caller's own exchanges
    # (BM25), read from counts that triggers on exchanges keep (count_words).
    """
CREATE TABLE {s}.caller_words (
    tenant    text NOT NULL,
    caller_id text NOT NULL,
    word      text NOT NULL,     -- a lexeme of search or pairs
    exchanges integer NOT NULL,  -- the caller's exchanges that hold it
    PRIMARY KEY (tenant, caller_id, word)
);
CREATE TABLE {s}.caller_sizes (
    tenant    text NOT NULL,
    caller_id text NOT NULL,
    exchanges integer NOT NULL,  -- the caller's exchanges
    words     bigint NOT NULL,   -- the lexemes they hold, in all
    PRIMARY KEY (tenant, caller_id)
);
-- One statement's rows at a time (a purge's too), in key order, so that writes of
-- one caller made at once wait for each other instead of deadlocking. A word whose
-- count falls to 0 is deleted: forget leaves none of the caller's words here.
CREATE FUNCTION {s}.count_words() RETURNS trigger LANGUAGE plpgsql AS $f$
DECLARE
    changed text := CASE TG_OP
        WHEN 'INSERT' THEN 'SELECT tenant, caller_id, search, pairs, 1 AS d FROM new_rows'
        WHEN 'DELETE' THEN 'SELECT tenant, caller_id, search, pairs, -1 AS d FROM old_rows'
        ELSE 'SELECT tenant, caller_id, search, pairs, 1 AS d FROM new_rows UNION ALL '
             'SELECT tenant, caller_id, search, pairs, -1 FROM old_rows' END;
    v text := 'search || coalesce(pairs, ''''::tsvector)';
BEGIN
    EXECUTE format(
        'INSERT INTO {s}.caller_words SELECT tenant, caller_id, w, sum(d) FROM (%s) c,'
        ' unnest(tsvector_to_array(%s)) w GROUP BY 1, 2, 3 HAVING sum(d) <> 0'
        ' ORDER BY 1, 2, 3 ON CONFLICT (tenant, caller_id, word)'
        ' DO UPDATE SET exchanges = caller_words.exchanges + excluded.exchanges', changed, v);
    EXECUTE format(
        'INSERT INTO {s}.caller_sizes SELECT tenant, caller_id, sum(d), sum(d * length(%s))'
        ' FROM (%s) c GROUP BY 1, 2 ORDER BY 1, 2 ON CONFLICT (tenant, caller_id)'
        ' DO UPDATE SET exchanges = caller_sizes.exchanges + excluded.exchanges,'
        ' words = caller_sizes.words + excluded.words', v, changed);
    IF TG_OP <> 'INSERT' THEN
        EXECUTE format(
            'DELETE FROM {s}.caller_words c USING (SELECT DISTINCT tenant, caller_id, w'
            ' FROM old_rows, unnest(tsvector_to_array(%s)) w) o WHERE c.tenant = o.tenant'
            ' AND c.caller_id = o.caller_id AND c.word = o.w AND c.exchanges <= 0', v);
        DELETE FROM {s}.caller_sizes c USING (SELECT DISTINCT tenant, caller_id FROM old_rows) o
            WHERE c.tenant = o.tenant AND c.caller_id = o.caller_id AND c.exchanges <= 0;
    END IF;
    RETURN NULL;
END $f$;
CREATE TRIGGER count_inserted AFTER INSERT ON {s}.exchanges REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.count_words();
CREATE TRIGGER count_deleted AFTER DELETE ON {s}.exchanges REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.count_words();
CREATE TRIGGER count_updated AFTER UPDATE ON {s}.exchanges
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.count_words();
INSERT INTO {s}.caller_words SELECT tenant, caller_id, w, count(*) FROM {s}.exchanges,
    unnest(tsvector_to_array(search || coalesce(pairs, ''::tsvector))) w GROUP BY 1, 2, 3;
INSERT INTO {s}.caller_sizes SELECT tenant, caller_id, count(*),
    sum(length(search || coalesce(pairs, ''::tsvector))) FROM {s}.exchanges GROUP BY 1, 2;
-- the roles that `sql --app-role` made write these tables through the triggers
DO $g$ DECLARE r record; BEGIN
    FOR r IN SELECT role_name FROM {s}.tenant_roles JOIN pg_roles ON rolname = role_name LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE'
                       ' ON {s}.caller_words, {s}.caller_sizes TO %I', r.role_name);
    END LOOP;
END $g$;
"""
    + "".join(
        f"ALTER TABLE {{s}}.{t} ENABLE ROW LEVEL SECURITY;\n"
        f"CREATE POLICY own_tenant ON {{s}}.{t} USING ({_OWN_TENANT}) WITH CHECK ({_OWN_TENANT});\n"
        for t in ("caller_words", "caller_sizes")
    ),
]
SCHEMA_VERSION = len(MIGRATIONS)
TABLES = ("exchanges", "facts", "summaries")
COUNTS = ("caller_words", "caller_sizes")
"""Kept by triggers from exchanges: never written or deleted by this code itself."""
SEARCH_INDEXES = ("exchanges_search", "exchanges_pairs")
EXCHANGE = "key, caller_id, call_id, user_text, assistant_text, interrupted, item_ids, created_at"
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
    # The (tenant, caller_id) key finds the caller's rows; @@ keeps those that match
    # a word (q) or a character pair (p). They are ranked by BM25 over the caller's
    # own exchanges: each query lexeme (w: its words, stemmed; pw: its pairs) weighs
    # by its inverse document frequency among them (caller_words, caller_sizes), its
    # count in the exchange saturates (K1), and long exchanges count less (B).
    "search": "WITH terms AS MATERIALIZED (SELECT w.word,"
    " ln(1 + (z.exchanges - w.exchanges + 0.5) / (w.exchanges + 0.5)) AS idf,"
    " z.words::float8 / greatest(z.exchanges, 1) AS avg"
    # one index lookup per query lexeme (LIMIT 1), whatever the statistics say
    " FROM unnest(tsvector_to_array(to_tsvector('english', %(w)s))"
    " || CAST(%(pw)s AS text[])) l, LATERAL (SELECT word, exchanges FROM {s}.caller_words"
    " WHERE tenant = %(t)s AND caller_id = %(c)s AND word = l LIMIT 1) w,"
    " {s}.caller_sizes z WHERE z.tenant = %(t)s AND z.caller_id = %(c)s)"
    # the same words twice (a fixed greeting saved as every call's opening) count
    # once, at their best rank: DISTINCT ON, then the best first
    f" SELECT {EXCHANGE} FROM (SELECT DISTINCT ON (user_text, assistant_text) {EXCHANGE},"
    " score FROM (SELECT *, (SELECT sum(idf * f * "
    f"{K1 + 1} / (f + {K1} * ({1 - B} + {B} * (length(search) + coalesce(length(pairs), 0))"
    " / avg))) FROM (SELECT lexeme, cardinality(positions) AS f FROM unnest(search)"
    " UNION ALL SELECT lexeme, cardinality(positions) FROM unnest(pairs)) u"
    " JOIN terms ON word = lexeme) AS score FROM {s}.exchanges,"
    " to_tsquery('english', %(q)s) q, CAST(%(p)s AS tsquery) p"
    " WHERE tenant = %(t)s AND caller_id = %(c)s AND (search @@ q OR pairs @@ p)"
    " AND call_id IS DISTINCT FROM %(x)s) e ORDER BY user_text, assistant_text,"
    " score DESC NULLS LAST, created_at DESC) d"
    " ORDER BY score DESC NULLS LAST, created_at DESC LIMIT %(n)s",
    "exchanges": f"SELECT {EXCHANGE} FROM {{s}}.exchanges"
    " WHERE tenant = %(t)s AND caller_id = %(c)s"
    " AND (%(call)s::text IS NULL OR call_id = %(call)s) ORDER BY created_at, seq",
    "save": "INSERT INTO {s}.exchanges (tenant, caller_id, key, call_id, user_text,"
    " assistant_text, interrupted, item_ids, created_at, pairs) VALUES (%(t)s, %(c)s,"
    " %(key)s, %(call)s, %(user)s, %(reply)s, %(cut)s, %(items)s, %(at)s, %(pairs)s)"
    " ON CONFLICT (tenant, caller_id, key) DO UPDATE SET user_text = excluded.user_text,"
    " assistant_text = excluded.assistant_text, interrupted = excluded.interrupted,"
    " item_ids = excluded.item_ids, pairs = excluded.pairs"
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
    "callers": "SELECT caller_id FROM {s}.exchanges WHERE tenant = %(t)s"
    " UNION SELECT caller_id FROM {s}.facts WHERE tenant = %(t)s"
    " UNION SELECT caller_id FROM {s}.summaries WHERE tenant = %(t)s",
}


class Target:
    """What a ``postgresql:`` URL names: ``conninfo`` for libpq (our parameters taken
    out), ``schema``, ``tenant``, and ``where`` to name it in messages (no password).
    Raises ``InvalidStoreUrlError``."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme.split("+")[0] not in ("postgresql", "postgres"):
            raise InvalidStoreUrlError(f"{redact(url)!r} is not a postgresql:// URL")
        params = dict(parse_qsl(parts.query, keep_blank_values=True))
        self.schema = params.pop("schema", "") or DEFAULT_SCHEMA
        self.tenant = params.pop("tenant", "") or DEFAULT_TENANT
        # A lower-case name needs no quoting, so it goes into SQL as it is.
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", self.schema):
            raise InvalidStoreUrlError(
                f"schema={self.schema!r}: use a-z, 0-9 and _ (63 at most)"
            )
        if not re.fullmatch(r"[A-Za-z0-9_.:@+\-]{1,128}", self.tenant):
            raise InvalidStoreUrlError(
                f"tenant={self.tenant!r}: use letters, digits and _.:@+-"
            )
        self.conninfo = urlunsplit(
            ("postgresql", parts.netloc, parts.path, urlencode(params), "")
        )
        try:
            info = conninfo_to_dict(self.conninfo)
        except psycopg.ProgrammingError as exc:  # libpq refused a parameter
            raise InvalidStoreUrlError(f"{redact(url)!r}: {exc}") from None
        self.where = (
            f"{info.get('host') or 'localhost'}:{info.get('port') or 5432}"
            f"/{info.get('dbname') or ''} schema {self.schema}"
        )

    def connect(self, **kwargs: Any) -> psycopg.Connection:
        """A synchronous connection (open_store's check, the operator commands)."""
        return psycopg.connect(self.conninfo, connect_timeout=CONNECT_TIMEOUT, **kwargs)


def open_store(url: str) -> PostgresStore:
    """Open the store a ``postgresql:`` URL names; synchronous, for prewarm.

    Raises ``InvalidStoreUrlError`` for a bad URL, and nothing for a server that is down or
    a schema that is missing or at another version: that is logged once (finding out
    takes at most ``CONNECT_TIMEOUT`` s) and the store refuses work until it is fixed,
    so calls go on without memory. Its connections open on first use, in the call's
    event loop (prewarm has none)."""
    store = PostgresStore(Target(url))
    try:
        with store.target.connect() as conn:
            store._schema_at(read_version(conn, store.target.schema))
    except psycopg.Error as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        store._report(
            f"cannot reach PostgreSQL at {store.target.where}", f" ({reason})"
        )
    except SchemaMismatchError:
        pass  # logged
    return store


def read_version(conn: psycopg.Connection, schema: str) -> int:
    """The schema's version (0: none); raises psycopg errors."""
    if _row(
        conn.execute("SELECT to_regclass(%s)", [f"{schema}.schema_version"]).fetchone()
    )[0]:
        return _row(
            conn.execute(f"SELECT version FROM {schema}.schema_version").fetchone()
        )[0]
    return 0


class PostgresStore:
    """The shared store; ``MemoryStore`` says what each method promises.

    One per worker process, opened by ``open_store`` and shared by its calls. Raises
    ``StoreUnavailableError`` when the server, the pool or the schema cannot be used now or
    a time bound ran out, ``SchemaMismatchError``, and psycopg errors."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._sql = {name: sql.format(s=target.schema) for name, sql in QUERIES.items()}
        self._pool: AsyncConnectionPool | None = None
        self._pool_loop: asyncio.AbstractEventLoop | None = None
        self._schema_ok = False
        self._schema_error: SchemaMismatchError | None = None
        self._recheck_at = 0.0
        self._problem: str | None = None  # what was last logged, so it is logged once
        self._in_use = (
            0  # connections running our work (all busy: the pool is exhausted)
        )
        # One caller's writes apply in the order they were made (a save already under
        # way lands before a forget that follows it), whichever connection each gets.
        self._order: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        self._closed = False

    # -- writes --

    async def save(self, exchange: Exchange) -> None:
        e = exchange
        args = {
            "key": e.key,
            "call": e.call_id,
            "user": e.user_text,
            "reply": e.assistant_text,
            "cut": e.interrupted,
            "items": list(e.item_ids),
            "at": e.created_at,
            "pairs": pair_vector(f"{e.user_text} {e.assistant_text}"),
        }
        await self._write(e.caller_id, [(self._sql["save"], args)], "a save")

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

        return await self._write(caller_id, reconciled, "a fact", timeout)

    async def save_summary(self, caller_id: str, call_id: str, text: str) -> None:
        args = {"call": call_id, "v": text, "at": time.time()}
        await self._write(caller_id, [(self._sql["summary"], args)], "a summary")

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

            return await self._write(caller_id, matching, "forgetting", timeout)
        # Deleting a row deletes its index entries (the search index's included).
        if kind is not None:
            tables, only = ["facts"], " AND kind = %(kind)s"
        elif call_id is not None:
            tables, only = ["summaries", "exchanges"], " AND call_id = %(call)s"
        else:
            tables, only = list(TABLES), ""
        args = {"kind": kind, "call": call_id}
        where = f"WHERE tenant = %(t)s AND caller_id = %(c)s{only}"
        deletes = [
            (f"DELETE FROM {self.target.schema}.{t} {where}", args) for t in tables
        ]
        return await self._write(caller_id, deletes, "forgetting", timeout)

    async def purge(self, *, before: float, what: str) -> int:
        if what not in PURGEABLE:
            raise ValueError(
                f"what must be one of {', '.join(PURGEABLE)}, not {what!r}"
            )
        column = "updated_at" if what == "facts" else "created_at"
        sql = f"DELETE FROM {self.target.schema}.{what} WHERE tenant = %(t)s AND {column} < %(b)s"
        return await self._write("", [(sql, {"b": before})], "a purge", PURGE_TIMEOUT)

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
        q = tsquery(query) if limit > 0 else None
        p = pair_query(query) if limit > 0 else None
        args = {
            "t": self.target.tenant,
            "c": caller_id,
            "q": q,
            "p": p,
            "w": " ".join(query_terms(query)),
            "pw": query_pairs(query),
            "x": exclude_call_id,
        }

        async def work(conn: psycopg.AsyncConnection) -> Recall:
            async with conn.pipeline():  # the queries go in one round trip
                facts = await conn.execute(self._sql["facts"], args)
                summaries = await conn.execute(
                    self._sql["summaries"], {**args, "n": RECENT_SUMMARIES}
                )
                found = (
                    await conn.execute(self._sql["search"], {**args, "n": limit})
                    if q or p
                    else None
                )
            return Recall(
                tuple(Fact(*r) for r in await facts.fetchall()),
                tuple(Summary(*r) for r in await summaries.fetchall()),
                tuple(_exchange(r) for r in await found.fetchall()) if found else (),
            )

        return await self._read(work)

    async def history(self, caller_id: str) -> list[Fact]:
        return [
            Fact(*r) for r in await self._fetch(self._sql["history"], {"c": caller_id})
        ]

    async def exchanges(
        self, caller_id: str, *, call_id: str | None = None
    ) -> list[Exchange]:
        args = {"c": caller_id, "call": call_id}
        return [_exchange(r) for r in await self._fetch(self._sql["exchanges"], args)]

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
        if not self._closed:
            self._closed = True
            if self._pool is not None and self._pool_loop is asyncio.get_running_loop():
                await self._pool.close()

    # -- how the work runs: in order, within bounds, on one pool per event loop --

    async def _fetch(self, sql: str, args: dict) -> list[tuple]:
        async def work(conn: psycopg.AsyncConnection) -> list[tuple]:
            return await (
                await conn.execute(sql, {"t": self.target.tenant, **args})
            ).fetchall()

        return await self._read(work)

    async def _read(self, work: Work[T]) -> T:
        return await _bounded(self._run(work, READ_TIMEOUT), READ_TIMEOUT, "a read")

    async def _write(
        self,
        caller_id: str,
        statements: list[tuple[str, dict]]
        | Callable[[psycopg.AsyncConnection, dict], Awaitable[Any]],
        what: str,
        timeout: float | None = None,
    ) -> Any:
        """Run ``statements`` ((sql, arguments) pairs) after the caller's earlier writes;
        returns the rows changed. ``statements`` may instead be a coroutine function
        (connection, {"t": tenant, "c": caller id}) whose result is returned, for a
        write that reads first; it needs ``timeout``. With ``timeout``: in one
        transaction, applied within that many seconds or not at all (the server stops
        its statements at the deadline; COMMIT is sent only while time is left).
        Without: each statement on its own, within SAVE_TIMEOUT (a save can be
        repeated, so a lost answer is no harm), in one round trip."""
        loop = asyncio.get_running_loop()
        bound = SAVE_TIMEOUT if timeout is None else timeout
        deadline = loop.time() + bound
        lock = self._order.setdefault(caller_id, asyncio.Lock())
        try:
            async with asyncio.timeout(
                bound
            ):  # a free lock is taken at once, in call order
                await lock.acquire()
        except TimeoutError:
            raise StoreUnavailableError(
                f"{what} waited {bound:g} s for earlier writes"
            ) from None

        async def run(conn: psycopg.AsyncConnection) -> Any:
            scope = {"t": self.target.tenant, "c": caller_id}
            if timeout is None:
                assert not callable(statements)
                return sum(
                    [
                        (await conn.execute(sql, {**scope, **a})).rowcount
                        for sql, a in statements
                    ]
                )
            changed: Any = 0
            async with conn.transaction():
                ms = max(1, int((deadline - loop.time()) * 1000))
                await conn.execute(
                    "SELECT set_config('statement_timeout', %s, true)", [str(ms)]
                )
                if callable(statements):
                    changed = await statements(conn, scope)
                for sql, args in [] if callable(statements) else statements:
                    changed += (await conn.execute(sql, {**scope, **args})).rowcount
                if loop.time() > deadline - COMMIT_MARGIN:
                    raise StoreUnavailableError(
                        f"{what} ran out of time; nothing was written"
                    )
            return changed

        try:
            left = deadline - loop.time()
            return await _bounded(self._run(run, left), left, what)
        finally:
            lock.release()

    async def _run(self, work: Work[T], timeout: float) -> T:
        """``work`` on a pooled connection. A connection that a server restart broke
        fails on its next use: the broken ones are dropped and the work tried once
        more (every statement here can be repeated: reads, upserts, deletes)."""
        if self._schema_error is not None and time.monotonic() < self._recheck_at:
            raise self._schema_error
        pool = await self._pool_for_this_loop()
        for attempt in (1, 2):
            conn = None
            try:
                # Half the time for a connection, so a pool with none to give is
                # told apart from a slow query.
                async with pool.connection(timeout=timeout / 2) as conn:
                    self._in_use += 1
                    try:
                        if not self._schema_ok:
                            await self._check_schema(conn)
                        result = await work(conn)
                    finally:
                        self._in_use -= 1
            except PoolTimeout:
                problem = (
                    f"all {POOL_SIZE} connections to {self.target.where} are busy"
                    if self._in_use >= POOL_SIZE
                    else f"cannot reach PostgreSQL at {self.target.where}"
                )
                self._report(problem)
                raise StoreUnavailableError(problem) from None
            except psycopg.OperationalError:
                if attempt == 2 or conn is None or not conn.broken:
                    raise
                await pool.check()
                continue
            self._report(None)
            return result
        raise AssertionError("unreachable")

    async def _pool_for_this_loop(self) -> AsyncConnectionPool:
        if self._closed:
            raise StoreUnavailableError("the memory store is closed")
        loop = asyncio.get_running_loop()
        if self._pool is None or self._pool_loop is not loop:
            # A pool belongs to the loop that opened it: the call's, made after prewarm.
            # (A store used from another loop, as in tests, gets a pool of its own.)
            self._pool_loop = loop
            self._pool = AsyncConnectionPool(
                self.target.conninfo,
                min_size=1,
                max_size=POOL_SIZE,
                kwargs={
                    "autocommit": True,
                    "connect_timeout": CONNECT_TIMEOUT,
                    "application_name": "livekit-memory",
                },
                configure=_configure,
                # A failed connection is retried after 1 s, then 2 s; after that the
                # pool gives up and the next query asks again at once, so a server
                # that is back is used within ~2 s however long it was away.
                reconnect_timeout=3.0,
                name=POOL_NAME,
                open=False,
            )
            await self._pool.open(wait=False)
        return self._pool

    async def _check_schema(self, conn: psycopg.AsyncConnection) -> None:
        name = f"{self.target.schema}.schema_version"
        version = 0
        if _row(
            await (await conn.execute("SELECT to_regclass(%s)", [name])).fetchone()
        )[0]:
            version = _row(
                await (await conn.execute(f"SELECT version FROM {name}")).fetchone()
            )[0]
        self._schema_at(version)

    def _schema_at(self, version: int) -> None:
        """Take the version found; raises SchemaMismatchError (logged once) unless current."""
        if version == SCHEMA_VERSION:
            self._schema_ok, self._schema_error = True, None
            return
        why = f"memory schema version {version} at {self.target.where}"
        todo = "run `uv run -m memory.postgres_store upgrade` with this MEMORY_URL"
        if version == 0:
            why = f"no memory schema at {self.target.where}"
        elif version < SCHEMA_VERSION:
            why += f", this code needs {SCHEMA_VERSION}"
        else:
            why += f" is newer than this code's {SCHEMA_VERSION}"
            todo = "deploy the newer agent"
        self._schema_error = SchemaMismatchError(f"{why}; {todo}")
        self._recheck_at = time.monotonic() + RECHECK_AFTER
        self._report(why, f": {todo}")
        raise self._schema_error

    def _report(self, problem: str | None, more: str = "") -> None:
        """Log a change of health once per process, not once per call or query."""
        if problem != self._problem:
            if problem is not None:
                logger.error("memory: %s; calls go on without memory%s", problem, more)
            else:
                logger.warning(
                    "memory: PostgreSQL at %s works again", self.target.where
                )
            self._problem = problem


async def _bounded(work: Awaitable[T], timeout: float, what: str) -> T:
    # The work runs as a task of its own and we stop waiting at the bound. Cancelling
    # it makes psycopg cancel the query on the server, which can take a while when the
    # network is gone; the caller does not wait for that.
    task = asyncio.ensure_future(work)
    task.add_done_callback(lambda t: t.cancelled() or t.exception())
    try:
        return await asyncio.wait_for(asyncio.shield(task), timeout)
    except BaseException as exc:
        task.cancel()
        if isinstance(exc, TimeoutError):
            raise StoreUnavailableError(
                f"{what} did not finish within {timeout:.2f} s"
            ) from None
        raise


async def _configure(conn: psycopg.AsyncConnection) -> None:
    ms = int(STATEMENT_TIMEOUT * 1000)
    await conn.execute(f"SET statement_timeout = {ms}")
    await conn.execute(f"SET idle_in_transaction_session_timeout = {2 * ms}")


def _exchange(row: tuple) -> Exchange:
    (
        key,
        caller_id,
        call_id,
        user_text,
        assistant_text,
        interrupted,
        item_ids,
        created_at,
    ) = row
    return Exchange(
        key,
        caller_id,
        call_id,
        user_text,
        assistant_text,
        interrupted,
        tuple(item_ids),
        created_at,
    )


def _row(row: tuple[Any, ...] | None) -> tuple[Any, ...]:
    """The row of a query that always returns one."""
    assert row is not None
    return row


def redact(url: str) -> str:
    # a password in a URL never reaches a log line or an error message
    return re.sub(r"(//[^:/@]*:)[^@/]*@", r"\1***@", url)


POOL_NAME = "livekit-memory"


class _OncePerOutage(logging.Filter):
    # psycopg_pool warns at every failed reconnection attempt; the store says once
    # that the server is down and once that it is back.
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or POOL_NAME not in record.getMessage()


logging.getLogger("psycopg.pool").addFilter(_OncePerOutage())


# -- Operator commands: uv run -m memory.postgres_store status|sql|upgrade|check -----------


def upgrade_steps(
    schema: str, from_version: int
) -> list[tuple[str, Callable[[psycopg.Connection, str], None] | None]]:
    """What takes ``schema`` from ``from_version`` to ``SCHEMA_VERSION``, in order:
    (SQL, then a function (connection, schema) to run after it, or None)."""
    steps: list[tuple[str, Callable[[psycopg.Connection, str], None] | None]] = []
    if from_version == 0:
        steps.append((f"CREATE SCHEMA IF NOT EXISTS {schema};", None))
    for n in range(from_version, SCHEMA_VERSION):
        sql, then = (m, None) if isinstance(m := MIGRATIONS[n], str) else m
        steps.append(
            (f"-- version {n} -> {n + 1}\n{sql.format(s=schema).strip()}", then)
        )
        steps.append((f"UPDATE {schema}.schema_version SET version = {n + 1};", None))
    return steps


def upgrade_sql(schema: str, from_version: int) -> str:
    """The SQL that takes ``schema`` from ``from_version`` to ``SCHEMA_VERSION``; a
    step done in Python is named in a comment (its docstring's first line)."""
    parts = []
    for sql, then in upgrade_steps(schema, from_version):
        parts.append(sql)
        if then is not None:
            said = (then.__doc__ or then.__name__).strip().splitlines()[0]
            parts.append(f"-- then, in Python ({then.__name__}): {said}")
    return "\n".join(parts)


def upgrade(url: str) -> tuple[int, int]:
    """Create or upgrade the URL's schema; returns (version before, version after).
    One transaction under an advisory lock: upgrades started together run one after
    the other (the later ones find nothing to do), and a failed one changes nothing.
    Raises SchemaMismatchError for a schema newer than this code, psycopg errors."""
    target = Target(url)
    with target.connect() as conn, conn.transaction():
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext(%s))",
            [f"livekit-memory:{target.schema}"],
        )
        found = read_version(conn, target.schema)
        if found > SCHEMA_VERSION:
            raise SchemaMismatchError(
                f"{target.where} is at version {found}, newer than this code's {SCHEMA_VERSION}"
            )
        for sql, then in upgrade_steps(target.schema, found):
            conn.execute(sql.encode())
            if then is not None:
                then(conn, target.schema)
    return found, SCHEMA_VERSION


def app_role_sql(schema: str, role: str, tenant: str) -> str:
    """SQL (for the schema's owner) that makes ``role`` a login role held to
    ``tenant`` by row-level security: no superuser, no BYPASSRLS, not the owner, and
    unable to change which tenant it is bound to. Raises InvalidStoreUrlError for a bad name."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", role):
        raise InvalidStoreUrlError(f"role {role!r}: use a-z, 0-9 and _ (63 at most)")
    return f"""-- A role for workers of tenant '{tenant}'; set its password with \\password {role}
CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT, INSERT, UPDATE, DELETE
    ON {schema}.exchanges, {schema}.facts, {schema}.summaries TO {role};
GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.caller_words, {schema}.caller_sizes TO {role};
GRANT SELECT ON {schema}.schema_version, {schema}.tenant_roles TO {role};
INSERT INTO {schema}.tenant_roles VALUES ('{role}', '{tenant}')
    ON CONFLICT (role_name) DO UPDATE SET tenant = excluded.tenant;"""


def vacuum(url: str) -> None:
    """Reclaim what forget and purge deleted, without blocking the workers: VACUUM
    the tables, and rebuild the search indexes and the word counts' key, whose pages
    keep the words of deleted rows (with no link to any row) until they are rebuilt.
    (A table page keeps a deleted row's bytes until a new row reuses the space.)"""
    target = Target(url)
    with target.connect(autocommit=True) as conn:
        for table in (*TABLES, *COUNTS):
            conn.execute(f"VACUUM {target.schema}.{table}")
        for index in (*SEARCH_INDEXES, "caller_words_pkey"):
            conn.execute(f"REINDEX INDEX CONCURRENTLY {target.schema}.{index}")


def isolation_report(url: str) -> list[tuple[bool, str]]:
    """Is tenant isolation in force for the URL's role? (ok, what was checked) pairs;
    it is when every one is ok. Raises psycopg errors."""
    target = Target(url)
    s, tenant = target.schema, target.tenant
    with target.connect() as conn:
        role, superuser, bypass = _row(
            conn.execute(
                "SELECT rolname, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"
            ).fetchone()
        )
        rls_on, owner = _row(
            conn.execute(
                """SELECT count(*) FILTER (WHERE relrowsecurity),
                      coalesce(bool_or(pg_has_role(current_user, relowner, 'USAGE')), false)
               FROM pg_class WHERE relnamespace = to_regnamespace(%s) AND relname = ANY(%s)""",
                [s, [*TABLES, *COUNTS]],
            ).fetchone()
        )
        bound = remap = None
        if read_version(conn, s) > 0:
            row = conn.execute(
                f"SELECT tenant FROM {s}.tenant_roles WHERE role_name = current_user"
            ).fetchone()
            bound = row[0] if row else None
            privilege = (
                "SELECT has_table_privilege(%s, 'INSERT, UPDATE, DELETE, TRUNCATE')"
            )
            remap = _row(conn.execute(privilege, [f"{s}.tenant_roles"]).fetchone())[0]
    return [
        (
            not superuser,
            f"role {role} is not a superuser (a superuser bypasses row-level security)",
        ),
        (not bypass, f"role {role} does not have BYPASSRLS"),
        (
            not owner,
            f"role {role} does not own the tables (owners bypass row-level security)",
        ),
        (
            rls_on == len(TABLES) + len(COUNTS),
            f"row-level security is on for {', '.join((*TABLES, *COUNTS))} in schema {s}",
        ),
        (
            bound == tenant,
            f"{s}.tenant_roles binds {role} to tenant {tenant!r} (found: {bound!r})",
        ),
        (remap is False, f"role {role} cannot change {s}.tenant_roles"),
    ]


def main(argv: list[str] | None = None) -> int:
    """The operator command. Exit codes: 0 fine, 1 something to do (status: upgrade
    needed; check: isolation not in force), 2 the server or the URL could not be used."""
    import os

    from dotenv import load_dotenv

    parser = argparse.ArgumentParser(
        prog="python -m memory.postgres_store", description=main.__doc__
    )
    parser.add_argument(
        "command", choices=["status", "sql", "upgrade", "check", "vacuum"]
    )
    parser.add_argument(
        "--url", help="default: MEMORY_URL from the environment or .env.local"
    )
    parser.add_argument(
        "--app-role", metavar="NAME", help="sql: print a role held to this tenant"
    )
    args = parser.parse_args(argv)
    load_dotenv(project_dir() / ".env.local")
    url = args.url or os.getenv("MEMORY_URL") or DEFAULT_URL
    try:
        target = Target(url)
        if args.command == "sql" and args.app_role:
            print(app_role_sql(target.schema, args.app_role, target.tenant))
            return 0
        if args.command == "upgrade":
            before, after = upgrade(url)
            print(
                f"{target.where}: version {before} -> {after}"
                if before < after
                else f"{target.where}: already at version {after}; nothing to do"
            )
            return 0
        if args.command == "check":
            report = isolation_report(url)
            for ok, line in report:
                # each line states what isolation needs: "FAIL" marks one not met
                print(f"{'ok  ' if ok else 'FAIL'} {line}")
            enforced = all(ok for ok, _ in report)
            print(
                f"tenant isolation is {'' if enforced else 'NOT '}in force for {redact(url)}"
            )
            return 0 if enforced else 1
        if args.command == "vacuum":
            vacuum(url)
            print(f"{target.where}: vacuumed; the search indexes rebuilt")
            return 0
        with target.connect() as conn:
            found = read_version(conn, target.schema)
        if args.command == "sql":
            print(
                upgrade_sql(target.schema, found) or f"-- {target.where} is up to date"
            )
            return 0
        state = (
            "up to date"
            if found == SCHEMA_VERSION
            else "missing: run upgrade"
            if found == 0
            else "older: run upgrade"
            if found < SCHEMA_VERSION
            else "newer than this code"
        )
        print(f"{target.where}: version {found}, this code {SCHEMA_VERSION}: {state}")
        return 0 if found == SCHEMA_VERSION else 1
    except (psycopg.Error, InvalidStoreUrlError, SchemaMismatchError) as exc:
        print(f"error: {exc}".strip(), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
