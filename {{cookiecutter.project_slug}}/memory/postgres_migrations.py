"""The PostgreSQL store's migrations: each step from one schema version to the next,
as SQL (and, where a step needs it, Python that fills the new columns of rows saved
before them). ``postgres_schema`` runs them (``upgrade``, ``upgrade_sql``); the
operator's command is ``postgres_admin``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# psycopg is installed only where this backend is used (``psycopg[binary,pool]``);
# elsewhere a type checker reads these names as Any instead of failing the folder.
import psycopg  # type: ignore[import-not-found, unused-ignore]

from .dates import date_words
from .postgres_search import caller_prefix, pair_vector, words_vector


def _update_in_batches(
    conn: psycopg.Connection,
    select: str,
    update: str,
    values: Callable[[tuple[Any, ...]], tuple[Any, ...] | None],
) -> None:
    """Run ``update`` with ``values(row)`` for each row ``select`` reads (a row whose
    values are None is left as it is). In batches, through a server-side cursor, so a
    large table is not held in memory."""
    with conn.cursor(name="rows_to_update") as rows, conn.cursor() as cursor:
        rows.execute(select)
        while batch := rows.fetchmany(1000):
            cursor.executemany(
                update, [v for row in batch if (v := values(row)) is not None]
            )


def _index_pairs(conn: psycopg.Connection, s: str) -> None:
    """Fill the pairs column of the exchanges saved before it existed."""
    # Only rows with non-ASCII text can have pairs.
    _update_in_batches(
        conn,
        f"SELECT tenant, caller_id, key, user_text || ' ' || assistant_text"
        f" FROM {s}.exchanges WHERE (user_text || assistant_text) ~ '[^[:ascii:]]'",
        f"UPDATE {s}.exchanges SET pairs = %s::tsvector"
        " WHERE tenant = %s AND caller_id = %s AND key = %s",
        lambda row: None if (v := pair_vector(row[3])) is None else (v, *row[:3]),
    )


TURN_ROWS = """(tenant, caller_id, key, side, seq, created_at, call_id, words, size)
    SELECT e.tenant, e.caller_id, e.key, t.side, e.seq, e.created_at, e.call_id, t.words,
        (SELECT coalesce(sum(cardinality(positions)), 0) FROM unnest(t.words))
    FROM {rows} e LEFT JOIN LATERAL (SELECT p.call_id, p.user_words || p.reply_words AS words
        FROM {s}.exchanges p WHERE p.tenant = e.tenant AND p.caller_id = e.caller_id
        AND p.created_at < e.created_at ORDER BY p.created_at DESC LIMIT 1) p ON true,
    LATERAL (SELECT CASE WHEN p.call_id = e.call_id THEN p.words ELSE '' END AS words) b,
    LATERAL (VALUES
        (0, setweight(e.user_words, 'A') || setweight(b.words || e.reply_words, 'B')
            || setweight(e.day_words, 'C')),
        (1, setweight(e.reply_words, 'A') || setweight(b.words || e.user_words, 'B')
            || setweight(e.day_words, 'C'))) t(side, words)
    WHERE t.side = 0 OR length(e.reply_words) > 0
    ORDER BY 1, 2, 3, 4"""
"""The ``turns`` rows of the exchanges in ``{rows}`` (``{s}``: the schema)."""


def _index_turns(conn: psycopg.Connection, s: str) -> None:
    """Fill the word columns of the exchanges saved before them, then index their turns."""

    # The day's words are in the zone of the process that upgrades (MEMORY_TIMEZONE).
    def words(row: tuple[Any, ...]) -> tuple[Any, ...]:
        t, c, key, user, reply, at = row
        p = caller_prefix(t, c)
        return (
            words_vector(p, user),
            words_vector(p, reply),
            words_vector(p, date_words(at)),
            t,
            c,
            key,
        )

    _update_in_batches(
        conn,
        f"SELECT tenant, caller_id, key, user_text, assistant_text, created_at"
        f" FROM {s}.exchanges",
        f"UPDATE {s}.exchanges SET user_words = %s::tsvector,"
        " reply_words = %s::tsvector, day_words = %s::tsvector"
        " WHERE tenant = %s AND caller_id = %s AND key = %s",
        words,
    )
    conn.execute(
        f"INSERT INTO {s}.turns {TURN_ROWS.format(s=s, rows=f'{s}.exchanges')}".encode()
    )


# Each entry takes a schema ({s}) from version N to N+1; {s}.schema_version holds N:
# SQL, or SQL and then a function (connection, schema) for a step that needs Python.
# Append, never edit: databases in the field are at every version. Row-level security
# binds each role listed in {s}.tenant_roles to its tenant; owners and superusers are
# not bound (see `check`).
_OWN_TENANT = (
    "tenant = (SELECT tenant FROM {s}.tenant_roles WHERE role_name = current_user)"
)
# A step's tuple may end with SQL to run after its function.
Step = Callable[[psycopg.Connection, str], None]
MIGRATIONS: list[str | tuple[str, Step] | tuple[str, Step, str]] = [
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
    # 5: recall ranks single turns, as the SQLite store does (see postgres_search):
    # one row per side of an exchange, with the words around it and its day, whose
    # lexemes carry the caller's prefix, so the GIN index keeps one list per caller
    # and word (a big caller's search no longer reads every caller's matches). The
    # word counts count turns. The exchanges' own search columns go.
    (
        """
DROP TRIGGER count_inserted ON {s}.exchanges;
DROP TRIGGER count_deleted ON {s}.exchanges;
DROP TRIGGER count_updated ON {s}.exchanges;
DROP FUNCTION {s}.count_words();
ALTER TABLE {s}.exchanges DROP COLUMN search, DROP COLUMN pairs,  -- and their indexes
    ADD COLUMN user_words  tsvector NOT NULL DEFAULT '',  -- postgres_search.words_vector
    ADD COLUMN reply_words tsvector NOT NULL DEFAULT '',
    ADD COLUMN day_words   tsvector NOT NULL DEFAULT '';
TRUNCATE {s}.caller_words, {s}.caller_sizes;
ALTER TABLE {s}.caller_words RENAME COLUMN exchanges TO turns;  -- the caller's turns holding it
ALTER TABLE {s}.caller_sizes RENAME COLUMN exchanges TO turns;
CREATE TABLE {s}.turns (
    tenant    text NOT NULL,
    caller_id text NOT NULL,
    key       text NOT NULL,      -- the exchange's
    side      smallint NOT NULL,  -- 0: the caller's turn, 1: the reply
    seq       bigint NOT NULL,    -- the exchange's: newest first among equals
    created_at double precision NOT NULL,  -- the exchange's (it is read by key and time)
    call_id   text NOT NULL,
    words     tsvector NOT NULL,  -- A: its own words, B: the words around it, C: its day's
    size      integer NOT NULL,   -- the words it holds (BM25's length)
    -- key first: the one index on (tenant, caller_id) is the GIN one, so a search
    -- reads the caller's lists, whatever the statistics say
    PRIMARY KEY (key, tenant, caller_id, side)
);
-- fastupdate off: a search never scans a pending list of recent rows
CREATE INDEX turns_search ON {s}.turns USING gin (words) WITH (fastupdate = off);
-- the caller's newest turns first, for a question of only common words
CREATE INDEX turns_by_seq ON {s}.turns (tenant, caller_id, seq);
-- A turn's context is the other side of its exchange and both sides of the exchange
-- before it in the same call (the caller's exchange just before, if of this call).
CREATE FUNCTION {s}.index_turns() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    DELETE FROM {s}.turns t USING new_rows e
        WHERE t.tenant = e.tenant AND t.caller_id = e.caller_id AND t.key = e.key;
    INSERT INTO {s}.turns """
        + TURN_ROWS.format(s="{s}", rows="new_rows")
        + """;
    RETURN NULL;
END $f$;
CREATE FUNCTION {s}.drop_turns() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    DELETE FROM {s}.turns t USING old_rows e
        WHERE t.tenant = e.tenant AND t.caller_id = e.caller_id AND t.key = e.key;
    RETURN NULL;
END $f$;
-- One statement's rows at a time, in key order, as in version 4's count_words.
CREATE FUNCTION {s}.count_turns() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    INSERT INTO {s}.caller_words SELECT tenant, caller_id, w, count(*) FROM new_rows,
        unnest(tsvector_to_array(words)) w GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (tenant, caller_id, word)
        DO UPDATE SET turns = caller_words.turns + excluded.turns;
    INSERT INTO {s}.caller_sizes SELECT tenant, caller_id, count(*), sum(size)
        FROM new_rows GROUP BY 1, 2 ORDER BY 1, 2 ON CONFLICT (tenant, caller_id)
        DO UPDATE SET turns = caller_sizes.turns + excluded.turns,
        words = caller_sizes.words + excluded.words;
    RETURN NULL;
END $f$;
CREATE FUNCTION {s}.uncount_turns() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    INSERT INTO {s}.caller_words SELECT tenant, caller_id, w, -count(*) FROM old_rows,
        unnest(tsvector_to_array(words)) w GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (tenant, caller_id, word)
        DO UPDATE SET turns = caller_words.turns + excluded.turns;
    INSERT INTO {s}.caller_sizes SELECT tenant, caller_id, -count(*), -sum(size)
        FROM old_rows GROUP BY 1, 2 ORDER BY 1, 2 ON CONFLICT (tenant, caller_id)
        DO UPDATE SET turns = caller_sizes.turns + excluded.turns,
        words = caller_sizes.words + excluded.words;
    -- a word whose count falls to 0 is deleted: forget leaves none of the caller's
    DELETE FROM {s}.caller_words c USING (SELECT DISTINCT tenant, caller_id, w
        FROM old_rows, unnest(tsvector_to_array(words)) w) o WHERE c.tenant = o.tenant
        AND c.caller_id = o.caller_id AND c.word = o.w AND c.turns <= 0;
    DELETE FROM {s}.caller_sizes c USING (SELECT DISTINCT tenant, caller_id FROM old_rows) o
        WHERE c.tenant = o.tenant AND c.caller_id = o.caller_id AND c.turns <= 0;
    RETURN NULL;
END $f$;
CREATE TRIGGER count_inserted AFTER INSERT ON {s}.turns REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.count_turns();
CREATE TRIGGER count_deleted AFTER DELETE ON {s}.turns REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.uncount_turns();
ALTER TABLE {s}.turns ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_tenant ON {s}.turns USING ({own}) WITH CHECK ({own});
-- the roles that `sql --app-role` made write it through the triggers
DO $g$ DECLARE r record; BEGIN
    FOR r IN SELECT role_name FROM {s}.tenant_roles JOIN pg_roles ON rolname = role_name LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON {s}.turns TO %I', r.role_name);
    END LOOP;
END $g$;
""".replace("{own}", _OWN_TENANT),
        _index_turns,
        """
CREATE TRIGGER index_inserted AFTER INSERT ON {s}.exchanges REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.index_turns();
CREATE TRIGGER index_updated AFTER UPDATE ON {s}.exchanges REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.index_turns();
CREATE TRIGGER index_deleted AFTER DELETE ON {s}.exchanges REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.drop_turns();
""",
    ),
    # 6: erasures reach live calls in every worker (see PostgresStore.forget):
    # forgetting a caller records when, and an exchange created before that time is
    # not saved after it, whichever worker writes it. caller_id '' is every caller
    # of the tenant: a retention purge of exchanges.
    """
CREATE TABLE {s}.erasures (
    tenant    text NOT NULL,
    caller_id text NOT NULL,
    erased_at double precision NOT NULL,  -- seconds since the epoch
    PRIMARY KEY (tenant, caller_id)
);
CREATE FUNCTION {s}.skip_erased() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    IF EXISTS (SELECT 1 FROM {s}.erasures e WHERE e.tenant = NEW.tenant
               AND e.caller_id IN (NEW.caller_id, '') AND e.erased_at >= NEW.created_at)
    THEN RETURN NULL; END IF;
    RETURN NEW;
END $f$;
CREATE TRIGGER skip_erased BEFORE INSERT ON {s}.exchanges
    FOR EACH ROW EXECUTE FUNCTION {s}.skip_erased();
ALTER TABLE {s}.erasures ENABLE ROW LEVEL SECURITY;
"""
    + f"CREATE POLICY own_tenant ON {{s}}.erasures USING ({_OWN_TENANT})"
    f" WITH CHECK ({_OWN_TENANT});\n"
    + """
DO $g$ DECLARE r record; BEGIN
    FOR r IN SELECT role_name FROM {s}.tenant_roles JOIN pg_roles ON rolname = role_name LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE ON {s}.erasures TO %I', r.role_name);
    END LOOP;
END $g$;
""",
]
