"""The SQLite memory file's schema: its migrations, how a file is checked and moved
to this code's version, and what an upgrade has to do.

``PRAGMA user_version`` holds a file's version; ``MIGRATIONS[N]`` moves it from N to
N + 1. A file is migrated by the first connection that opens it (``migrate``, in one
transaction the caller holds), or, when big, on a thread of its own
(``sqlite_file.SQLiteFile.upgrade_in_background``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path

from .dates import date_words
from .errors import SchemaMismatchError
from .sqlite_index import PREVIOUS_IN_CALL, TRIGGERS, add_functions, index_turns
from .sqlite_search import CALLER_PREFIX_DIGITS, indexed_words

# Each entry moves a file from version N to N+1; `PRAGMA user_version` holds N: SQL,
# or a function for a step that needs Python. Append, never edit: files in the field
# are at every version.
MIGRATIONS: list[str | Callable[[sqlite3.Connection], None]] = [
    """
    CREATE TABLE exchanges (
        key            TEXT PRIMARY KEY,
        caller_id      TEXT NOT NULL,
        caller_key     TEXT NOT NULL,
        call_id        TEXT NOT NULL,
        user_text      TEXT NOT NULL,
        assistant_text TEXT NOT NULL,
        interrupted    INTEGER NOT NULL DEFAULT 0,
        item_ids       TEXT NOT NULL,
        created_at     REAL NOT NULL
    );
    CREATE INDEX exchanges_by_caller ON exchanges (caller_id, created_at);
    -- External-content FTS5 index, kept in step by triggers, so deleting a row
    -- also deletes its index entries. caller_key (a hash of the caller id, one
    -- token) is indexed too: matching it narrows a search to one caller inside the
    -- index, so search time does not grow with the number of callers.
    CREATE VIRTUAL TABLE exchanges_fts USING fts5 (
        caller_key, user_text, assistant_text,
        content='exchanges', content_rowid='rowid',
        tokenize='porter unicode61 remove_diacritics 2'
    );
    CREATE TRIGGER exchanges_ai AFTER INSERT ON exchanges BEGIN
        INSERT INTO exchanges_fts (rowid, caller_key, user_text, assistant_text)
        VALUES (new.rowid, new.caller_key, new.user_text,
                new.assistant_text);
    END;
    CREATE TRIGGER exchanges_ad AFTER DELETE ON exchanges BEGIN
        INSERT INTO exchanges_fts (exchanges_fts, rowid, caller_key, user_text, assistant_text)
        VALUES ('delete', old.rowid, old.caller_key,
                old.user_text, old.assistant_text);
    END;
    CREATE TRIGGER exchanges_au AFTER UPDATE ON exchanges BEGIN
        INSERT INTO exchanges_fts (exchanges_fts, rowid, caller_key, user_text, assistant_text)
        VALUES ('delete', old.rowid, old.caller_key,
                old.user_text, old.assistant_text);
        INSERT INTO exchanges_fts (rowid, caller_key, user_text, assistant_text)
        VALUES (new.rowid, new.caller_key, new.user_text,
                new.assistant_text);
    END;
    CREATE TABLE facts (
        caller_id  TEXT NOT NULL,
        kind       TEXT NOT NULL,
        value      TEXT NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (caller_id, kind)
    );
    CREATE TABLE summaries (
        caller_id  TEXT NOT NULL,
        call_id    TEXT NOT NULL,
        text       TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (caller_id, call_id)
    );
    """,
    # 2: search by each caller's own words (see sqlite_search.caller_prefix) and by
    # character pairs for Chinese, Japanese, Korean and Thai (see search_words).
    lambda conn: _index_words_per_caller(conn),
    # 3: facts keep dates and history, and a kind may hold several values
    # (reconcile decides which), so (caller_id, kind) is no longer unique.
    """
    CREATE TABLE facts_v2 (
        caller_id   TEXT NOT NULL,
        kind        TEXT NOT NULL,
        value       TEXT NOT NULL,
        learned_at  REAL NOT NULL,
        updated_at  REAL NOT NULL,
        replaced_at REAL            -- NULL: a current value; else history
    );
    INSERT INTO facts_v2 (caller_id, kind, value, learned_at, updated_at)
        SELECT caller_id, kind, value, updated_at, updated_at FROM facts;
    DROP TABLE facts;
    ALTER TABLE facts_v2 RENAME TO facts;
    CREATE INDEX facts_by_caller ON facts (caller_id, kind);
    """,
    # 4: one search row per turn, with the turns around it and its day (see _index_turns).
    lambda conn: _index_turns(conn),
    # 5: a caller's latest summaries read from an index
    # (sqlite_queries.LATEST_SUMMARIES).
    "CREATE INDEX summaries_by_time ON summaries (caller_id, created_at);",
    # 6: a turn's context also holds the whole exchange before it in the call.
    lambda conn: _context_from_previous_exchange(conn),
    # 7: the one-row-per-exchange index goes: recall ranks turns_fts since schema 4,
    # and its triggers still indexed every save (10 to 15 % of a save's time).
    """
    DROP TRIGGER exchanges_ai;
    DROP TRIGGER exchanges_ad;
    DROP TRIGGER exchanges_au;
    DROP TABLE exchanges_fts;
    """,
    # 8: the turn index holds no copy of what it indexes (see _contentless_turns).
    lambda conn: _contentless_turns(conn),
    # 9: erasures reach live calls in every process (see sqlite_queries.forget):
    # forgetting a caller records when, and an exchange said before that time is
    # not saved after it (a live call's late save, a retry), whichever process
    # writes it. caller_id '' is every caller: a retention purge of exchanges.
    """
    CREATE TABLE erasures (
        caller_id TEXT PRIMARY KEY,
        erased_at REAL NOT NULL     -- seconds since the epoch
    );
    CREATE TRIGGER exchanges_erased BEFORE INSERT ON exchanges
    WHEN EXISTS (SELECT 1 FROM erasures WHERE caller_id IN (new.caller_id, '')
                 AND erased_at >= new.created_at)
    BEGIN SELECT RAISE(IGNORE); END;
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)
TABLES = {"exchanges", "turns_fts", "facts", "summaries", "forgetting", "erasures"}


def migrate(conn: sqlite3.Connection, path: Path) -> int | None:
    """Check the file ``conn`` has open (at ``path``, named in errors) and move it to
    ``SCHEMA_VERSION``, inside the transaction the caller holds (``BEGIN
    IMMEDIATE``, so two processes opening a new file at once migrate it once).
    Returns the version it was upgraded from, None for a new or current file.

    Raises ``SchemaMismatchError`` for a file of a newer version or of another
    application, and ``sqlite3.Error`` for one that cannot be written (checked by a
    write here, so a read-only file fails now and not on the first call)."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise SchemaMismatchError(
            f"{path} has memory schema version {version}, newer than this "
            f"code's {SCHEMA_VERSION}; upgrade the agent before opening it"
        )
    tables = {t for t in _tables(conn) if not t.startswith("sqlite_")}
    if version == 0 and tables:
        # Ours sets the version in the transaction that adds its tables: a
        # file with tables and no version is another application's.
        raise SchemaMismatchError(
            f"{path} is not a memory file (no memory schema version, but "
            f"tables {', '.join(sorted(tables)[:5])}); give MEMORY_URL a file "
            "of its own"
        )
    if version and "exchanges" not in tables:
        # another application's file: check before any migration touches it
        _not_memory(path, version, {"exchanges"})
    apply_migrations(conn, version, SCHEMA_VERSION)
    missing = TABLES - _tables(conn)
    if missing:
        _not_memory(path, version, missing)
    # a write now, so a read-only file fails here and not on the first call
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    return version if 0 < version < SCHEMA_VERSION else None


def _not_memory(path: Path, version: int, missing: set[str]) -> None:
    raise SchemaMismatchError(
        f"{path} is not a memory file (schema version {version} but no "
        f"{', '.join(sorted(missing))} table); give MEMORY_URL a file of its own"
    )


def rows_to_upgrade(path: Path, busy_timeout: float) -> int:
    """How many exchanges a file of an older schema version holds (its largest rowid:
    no scan); 0 for a file of this version, one that is not there or is not ours (the
    usual open says what is wrong with it)."""
    if not path.is_file():
        return 0
    try:
        conn = sqlite3.connect(path, timeout=busy_timeout)
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if not 0 < version < SCHEMA_VERSION:
                return 0
            return int(
                conn.execute("SELECT max(rowid) FROM exchanges").fetchone()[0] or 0
            )
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


_FTS_TOKENIZER = "porter unicode61 remove_diacritics 2 categories 'L* N* Co M*'"
"""FTS5's porter stemmer over its unicode61 tokenizer, with combining marks (M*)
kept inside words as search_words keeps them (Thai vowel signs are marks)."""
_WORDS = ("user_words", "reply_words")


def _index_words_per_caller(conn: sqlite3.Connection) -> None:
    # Schema 2: the index holds each exchange's search words behind the caller's
    # prefix (columns user_words, reply_words, filled in Python by
    # sqlite_queries.save), instead of the raw text and a caller_key column. Runs
    # inside migrate's transaction.
    for column in _WORDS:
        conn.execute(
            f"ALTER TABLE exchanges ADD COLUMN {column} TEXT NOT NULL DEFAULT ''"
        )
    for trigger in ("exchanges_ai", "exchanges_ad", "exchanges_au"):
        conn.execute(f"DROP TRIGGER {trigger}")
    conn.execute("DROP TABLE exchanges_fts")
    rows = conn.execute(
        "SELECT rowid, caller_id, user_text, assistant_text FROM exchanges"
    )
    conn.executemany(
        "UPDATE exchanges SET user_words = ?, reply_words = ? WHERE rowid = ?",
        (
            (indexed_words(r[1], r[2]), indexed_words(r[1], r[3]), r[0])
            for r in rows.fetchall()
        ),
    )
    columns = ", ".join(_WORDS)
    old = ", ".join(f"old.{c}" for c in _WORDS)
    new = ", ".join(f"new.{c}" for c in _WORDS)
    conn.execute(
        f"""CREATE VIRTUAL TABLE exchanges_fts USING fts5 ({columns},
            content='exchanges', content_rowid='rowid', tokenize="{_FTS_TOKENIZER}")"""
    )
    conn.execute("INSERT INTO exchanges_fts (exchanges_fts) VALUES ('rebuild')")
    delete = f"""INSERT INTO exchanges_fts (exchanges_fts, rowid, {columns})
                 VALUES ('delete', old.rowid, {old});"""
    insert = f"INSERT INTO exchanges_fts (rowid, {columns}) VALUES (new.rowid, {new});"
    conn.execute(
        f"CREATE TRIGGER exchanges_ai AFTER INSERT ON exchanges BEGIN {insert} END"
    )
    conn.execute(
        f"CREATE TRIGGER exchanges_ad AFTER DELETE ON exchanges BEGIN {delete} END"
    )
    conn.execute(
        f"CREATE TRIGGER exchanges_au AFTER UPDATE ON exchanges BEGIN {delete} {insert} END"
    )


_TURN_ROWS_4 = """
    INSERT INTO turns_fts (rowid, words, context, day)
    SELECT {e}.rowid * 2, {e}.user_words,
           coalesce((SELECT CASE WHEN p.call_id = {e}.call_id THEN p.reply_words END
                     FROM exchanges p WHERE p.caller_id = {e}.caller_id
                     AND p.created_at < {e}.created_at
                     ORDER BY p.created_at DESC LIMIT 1), '') || ' ' || {e}.reply_words,
           {e}.day_words {source};
    INSERT INTO turns_fts (rowid, words, context, day)
    SELECT {e}.rowid * 2 + 1, {e}.reply_words, {e}.user_words, {e}.day_words
    {source} {where} {e}.reply_words != '';"""
_DROP_TURN_ROWS = (
    "DELETE FROM turns_fts WHERE rowid IN (old.rowid * 2, old.rowid * 2 + 1);"
)


def _index_turns(conn: sqlite3.Connection, *, fill: bool = True) -> None:
    # Schema 4: recall ranks single turns (each side of an exchange; rowid = the
    # exchange's rowid * 2, + 1 for the reply), each indexed with the turns next to
    # it at a lower weight (the caller's turn: the agent's turn before it in the call
    # and the reply to it; the reply: the caller's turn it answers), so the answer to
    # a question is found by the question's words, and with its day's words
    # (date_words, in the deployment's zone when indexed). All columns hold
    # caller-prefixed words (indexed_words). Kept in step by triggers on exchanges,
    # so every way a row is written or deleted keeps the index right.
    conn.execute("ALTER TABLE exchanges ADD COLUMN day_words TEXT NOT NULL DEFAULT ''")
    rows = conn.execute("SELECT rowid, caller_id, created_at FROM exchanges").fetchall()
    conn.executemany(
        "UPDATE exchanges SET day_words = ? WHERE rowid = ?",
        ((indexed_words(r[1], date_words(r[2])), r[0]) for r in rows),
    )
    conn.execute(
        f"""CREATE VIRTUAL TABLE turns_fts USING fts5 (words, context, day,
            tokenize="{_FTS_TOKENIZER}")"""
    )
    if fill:  # (see apply_migrations)
        for statement in split_sql(
            _TURN_ROWS_4.format(e="x", source="FROM exchanges x", where="WHERE")
        ):
            conn.execute(statement)
    insert = _TURN_ROWS_4.format(e="new", source="", where="WHERE")
    conn.execute(
        f"CREATE TRIGGER turns_ai AFTER INSERT ON exchanges BEGIN {insert} END"
    )
    conn.execute(
        f"CREATE TRIGGER turns_ad AFTER DELETE ON exchanges BEGIN {_DROP_TURN_ROWS} END"
    )
    conn.execute(
        f"CREATE TRIGGER turns_au AFTER UPDATE ON exchanges BEGIN {_DROP_TURN_ROWS} {insert} END"
    )


_PREVIOUS_EXCHANGE = """coalesce((SELECT CASE WHEN p.call_id = {e}.call_id
    THEN p.user_words || ' ' || p.reply_words END FROM exchanges p
    WHERE p.caller_id = {e}.caller_id AND p.created_at < {e}.created_at
    ORDER BY p.created_at DESC LIMIT 1), '')"""
_TURN_ROWS = f"""
    INSERT INTO turns_fts (rowid, words, context, day)
    SELECT {{e}}.rowid * 2, {{e}}.user_words,
           {_PREVIOUS_EXCHANGE} || ' ' || {{e}}.reply_words, {{e}}.day_words {{source}};
    INSERT INTO turns_fts (rowid, words, context, day)
    SELECT {{e}}.rowid * 2 + 1, {{e}}.reply_words,
           {_PREVIOUS_EXCHANGE} || ' ' || {{e}}.user_words, {{e}}.day_words
    {{source}} {{where}} {{e}}.reply_words != '';"""


def _context_from_previous_exchange(
    conn: sqlite3.Connection, *, fill: bool = True
) -> None:
    # Schema 6: a turn's context (turns_fts.context, weight CONTEXT_WEIGHT) is the
    # other side of its own exchange and both sides of the exchange before it in the
    # same call (schema 4 had, for the caller's turn, only that exchange's reply, and
    # for a reply nothing before its own exchange): an answer often continues what was
    # said a turn or two earlier ("How did it go?" after the caller named the event).
    # The rows are written again with it, and the triggers replaced.
    for trigger in ("turns_ai", "turns_au"):
        conn.execute(f"DROP TRIGGER {trigger}")
    conn.execute("DELETE FROM turns_fts")
    if fill:
        for statement in split_sql(
            _TURN_ROWS.format(e="x", source="FROM exchanges x", where="WHERE")
        ):
            conn.execute(statement)
    insert = _TURN_ROWS.format(e="new", source="", where="WHERE")
    conn.execute(
        f"CREATE TRIGGER turns_ai AFTER INSERT ON exchanges BEGIN {insert} END"
    )
    conn.execute(
        f"CREATE TRIGGER turns_au AFTER UPDATE ON exchanges BEGIN {_DROP_TURN_ROWS} {insert} END"
    )


def _contentless_turns(conn: sqlite3.Connection) -> None:
    # Schema 8: the turn index (turns_fts) is contentless: it keeps its terms, not a
    # copy of each row's words (words, context and day: most of a file's bytes, the
    # context repeating the exchange before), and the exchanges keep their text, not
    # its caller-prefixed words (user_words, reply_words: three times the text).
    # FTS5 deletes a row of a contentless table only when given the values it was
    # indexed with; the triggers compute them again (memory_words, see WORDS) from
    # the exchange, its day (``day``: its date words, as indexed, without the prefix)
    # and the exchange it was indexed with as context (``context_of``, its rowid:
    # the caller's exchange before it, when in the same call). Deleting or changing
    # an exchange indexes again the one whose context it was. caller_key (unused
    # since schema 2) goes too. Runs inside migrate's transaction.
    # The table is written anew once (rowids kept: they grow with time, which search
    # relies on), not altered column by column (each ALTER rewrote every row).
    add_functions(conn)
    conn.create_function("memory_unprefixed", 1, _unprefixed, deterministic=True)
    for trigger in ("turns_ai", "turns_ad", "turns_au"):
        conn.execute(f"DROP TRIGGER {trigger}")
    conn.execute("DROP TABLE turns_fts")
    conn.execute(f"CREATE TABLE exchanges_8 ({_EXCHANGES_8})")
    columns = (
        "key, caller_id, call_id, user_text, assistant_text, interrupted, item_ids"
    )
    conn.execute(
        f"""INSERT INTO exchanges_8 (rowid, {columns}, created_at, day, context_of)
            SELECT rowid, {columns}, created_at, memory_unprefixed(day_words),
                   ({PREVIOUS_IN_CALL.format(e="x")})
            FROM exchanges x"""
    )
    conn.execute("DROP TABLE exchanges")
    conn.execute("ALTER TABLE exchanges_8 RENAME TO exchanges")
    conn.execute(
        "CREATE INDEX exchanges_by_caller ON exchanges (caller_id, created_at)"
    )
    conn.execute(
        "CREATE INDEX exchanges_by_context ON exchanges (context_of) "
        "WHERE context_of IS NOT NULL"
    )
    conn.execute(
        f"""CREATE VIRTUAL TABLE turns_fts USING fts5 (words, context, day,
            content='', tokenize="{_FTS_TOKENIZER}")"""
    )
    # empty but inside a forget's transaction (FORGET_TURNS)
    conn.execute("CREATE TABLE forgetting (caller_id TEXT NOT NULL, call_id TEXT)")
    index_turns(conn)
    for name, body in TRIGGERS.items():
        conn.execute(f"CREATE TRIGGER {name} {body}")


_EXCHANGES_8 = """
    key            TEXT PRIMARY KEY,
    caller_id      TEXT NOT NULL,
    call_id        TEXT NOT NULL,
    user_text      TEXT NOT NULL,
    assistant_text TEXT NOT NULL,
    interrupted    INTEGER NOT NULL DEFAULT 0,
    item_ids       TEXT NOT NULL,
    created_at     REAL NOT NULL,
    day            TEXT NOT NULL DEFAULT '',  -- its date words, as indexed
    context_of     INTEGER  -- rowid of the exchange indexed as its context, or NULL
"""


def _unprefixed(words: str) -> str:
    # schema 7's day_words, caller-prefixed, as the words alone
    return " ".join(w[CALLER_PREFIX_DIGITS:] for w in words.split())


def apply_migrations(conn: sqlite3.Connection, start: int, end: int) -> None:
    """Move the file ``conn`` has open from schema version ``start`` to ``end`` (steps
    ``MIGRATIONS[start:end]``, each followed by its ``user_version``). The caller
    holds the transaction (``migrate``); tests and benchmarks/upgrade.py use it to
    make a file of an older version.

    Steps are never edited, but two are run with less work: when step 6 is in the
    same upgrade (the same transaction), step 4 creates the turn index without
    filling it from the stored exchanges, since step 6 deletes and refills every
    row of it (filling it twice took 37 % of a schema 3 -> 6 upgrade,
    benchmarks/upgrade.py); and step 6 leaves it empty when step 8, which builds it
    anew, follows. Nothing can read the file in between."""
    for number in range(start, end):
        step = MIGRATIONS[number]
        if number == 3 and end >= 6:
            _index_turns(conn, fill=False)
        elif number == 5 and end >= 8:
            _context_from_previous_exchange(conn, fill=False)
        elif callable(step):
            step(conn)
        else:
            for statement in split_sql(step):
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {number + 1}")


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {
        r[0]
        for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    }


def split_sql(script: str) -> Iterable[str]:
    # sqlite3.executescript() would COMMIT our open transaction; run statements one
    # by one instead. complete_statement() knows that a trigger body's ';' is inside.
    buffer = ""
    for line in script.splitlines(keepends=True):
        if line.strip().startswith("--"):
            continue
        buffer += line
        if sqlite3.complete_statement(buffer):
            yield buffer.strip()
            buffer = ""
    if buffer.strip():
        yield buffer.strip()
