"""The SQLite store's turn index (``turns_fts``, schema 8): what it holds for each
exchange, and the triggers and statements that keep it equal to the stored exchanges.

Recall ranks single turns: each side of an exchange is one row (rowid = the exchange's
rowid * 2, + 1 for the reply) holding its own words, as context the other side and
both sides of the exchange before it in the call, and its day's words (``search``
in ``sqlite_search`` ranks them; the kit's benchmarks/locomo_recall.py measured each
part). All of them are caller-prefixed search words (``sqlite_search.indexed_words``).
The index is contentless: it keeps its terms, not a copy of the words, and FTS5
deletes a row of such a table only when given the values it was indexed with, so
those are computed again from what is stored (see ``TRIGGERS``).
"""

from __future__ import annotations

import functools
import sqlite3

from .sqlite_search import caller_prefix
from .words import search_words

WORDS = "memory_words"
"""The SQL function the turn index's triggers compute its words with:
``memory_words(caller_id, text)`` is ``sqlite_search.indexed_words`` (the text's
search words, each behind the caller's prefix). Every connection that writes
exchanges has it (``add_functions``); one that has not (an sqlite3 shell) cannot
write them at all, rather than write rows the index does not match."""


def add_functions(conn: sqlite3.Connection) -> None:
    """Give ``conn`` the SQL function the schema's triggers call (``WORDS``)."""
    conn.create_function(WORDS, 2, _indexed_words, deterministic=True)


@functools.lru_cache(maxsize=256)
def _indexed_words(caller_id: str, text: str) -> str:
    # indexed_words, in one C-level join (a third of a forget's time went to
    # building these strings word by word). A trigger asks for the words of one text
    # several times (a turn's own words, the other side's context, the next
    # exchange's context): each is computed once.
    # A long text's in parts, so no one join holds the GIL long (limits.PIECE_CHARS).
    words = search_words(text)
    if not words:
        return ""
    prefix = _prefix(caller_id)
    between = f" {prefix}"
    parts = [
        between.join(words[at : at + _JOINED]) for at in range(0, len(words), _JOINED)
    ]
    return prefix + between.join(parts)


_JOINED = 2000


_prefix = functools.lru_cache(maxsize=1024)(caller_prefix)


def _turn_rows(
    e: str, context: str, source: str = "", delete: bool = False
) -> list[str]:
    # The two turn rows of exchange ``e`` (a row alias: new, old, or one of
    # ``source``), inserted or (``delete``) deleted with the values they were indexed
    # with, which FTS5 needs to delete from a contentless table: the caller's turn
    # (rowid * 2) and the reply (rowid * 2 + 1, only when it has words), each with
    # ``context`` (SQL: the words of the exchange before it in the call) and the
    # other side as context, and the day's words.
    columns = (
        "turns_fts, rowid, words, context, day"
        if delete
        else "rowid, words, context, day"
    )
    lead = "'delete', " if delete else ""
    user, reply, day = (
        f"{WORDS}({e}.caller_id, {e}.{c})"
        for c in ("user_text", "assistant_text", "day")
    )
    where = "AND" if "WHERE" in source else "WHERE"
    return [
        f"""INSERT INTO turns_fts ({columns})
        SELECT {lead}{e}.rowid * 2, {user}, {context} || ' ' || {reply}, {day}
        {source}""",
        f"""INSERT INTO turns_fts ({columns})
        SELECT {lead}{e}.rowid * 2 + 1, {reply}, {context} || ' ' || {user}, {day}
        {source} {where} {reply} != ''""",
    ]


def _body(*parts: list[str]) -> str:
    # statements as a trigger's body
    return "".join(f"{statement};\n" for part in parts for statement in part)


def _context_of(e: str) -> str:
    # the words of the exchange ``e`` was indexed with as its context (context_of)
    return f"""coalesce((SELECT {_both("p")} FROM exchanges p
        WHERE p.rowid = {e}.context_of), '')"""


def _both(e: str) -> str:
    # the words of both sides of exchange ``e``
    user, reply = (f"{WORDS}({e}.caller_id, {e}.{c})" for c in TEXTS)
    return f"{user} || ' ' || {reply}"


TEXTS = ("user_text", "assistant_text")
_NEXT = "FROM exchanges n WHERE n.context_of = old.rowid"
_NOT_FORGOTTEN = """NOT EXISTS (SELECT 1 FROM forgetting f WHERE f.caller_id = old.caller_id
    AND (f.call_id IS NULL OR f.call_id = old.call_id))"""
_INSERTED = _body(_turn_rows("new", _context_of("new")))
# An exchange whose context this one was is indexed again without it (context_of
# NULL): its index rows never hold words no longer stored. Not for the rows of a
# forget (FORGET_TURNS), whose turns are deleted in bulk first.
_DELETED = _body(
    _turn_rows("old", _context_of("old"), delete=True),
    _turn_rows("n", _both("old"), _NEXT, delete=True),
    _turn_rows("n", "''", _NEXT),
    ["UPDATE exchanges SET context_of = NULL WHERE context_of = old.rowid"],
)
# A changed text: its rows, and those of the exchange it is the context of.
_CHANGED = _body(
    _turn_rows("old", _context_of("old"), delete=True),
    _turn_rows("n", _both("old"), _NEXT, delete=True),
    _turn_rows("new", _context_of("new")),
    _turn_rows("n", _both("new"), _NEXT),
)
TRIGGERS = {
    "turns_ai": f"AFTER INSERT ON exchanges BEGIN {_INSERTED} END",
    "turns_ad": f"AFTER DELETE ON exchanges WHEN {_NOT_FORGOTTEN} BEGIN {_DELETED} END",
    "turns_au": f"AFTER UPDATE OF {', '.join(TEXTS)} ON exchanges BEGIN {_CHANGED} END",
}
"""The triggers on ``exchanges`` that keep the turn index equal to one built afresh
from the stored exchanges (``index_turns``; checked by a test after saves, a
change, a purge and forgets), by name."""


def index_turns(conn: sqlite3.Connection) -> None:
    """Index every stored exchange's turns into an empty ``turns_fts`` (schema 8),
    each with the exchange its ``context_of`` names as context: what the triggers
    keep it equal to. Needs ``add_functions``."""
    for statement in _turn_rows("x", _context_of("x"), "FROM exchanges x"):
        conn.execute(statement)


PREVIOUS_IN_CALL = """SELECT CASE WHEN p.call_id = {e}.call_id THEN p.rowid END
    FROM exchanges p WHERE p.caller_id = {e}.caller_id
    AND p.created_at < {e}.created_at ORDER BY p.created_at DESC LIMIT 1"""
"""The exchange whose words an exchange ``e`` is indexed with as context: the
caller's exchange before it, when in the same call (SQL of its rowid, or NULL)."""


def _both_turn_rows_deleted(source: str) -> str:
    # The two turn rows of each exchange ``x`` of ``source`` deleted in one
    # statement, the caller's turn then the reply, exchange by exchange: each text's
    # words are computed once (the cache holds what was just asked for), where one
    # statement per side computed every exchange's words twice (0.83 against 0.56
    # CPU seconds for a 10,000-exchange caller; benchmarks/writes.py).
    user, reply, day = (
        f"{WORDS}(x.caller_id, x.{c})" for c in ("user_text", "assistant_text", "day")
    )
    return f"""INSERT INTO turns_fts (turns_fts, rowid, words, context, day)
        SELECT 'delete', x.rowid * 2 + s.side,
            CASE s.side WHEN 0 THEN {user} ELSE {reply} END,
            {_context_of("x")} || ' ' || CASE s.side WHEN 0 THEN {reply} ELSE {user} END,
            {day}
        FROM exchanges x CROSS JOIN (SELECT 0 AS side UNION ALL SELECT 1) s
        {source} AND (s.side = 0 OR {reply} != '')"""


FORGET_TURNS = [
    "INSERT INTO forgetting (caller_id, call_id) VALUES (:caller_id, :call_id)",
    _both_turn_rows_deleted(
        "WHERE x.caller_id = :caller_id AND (:call_id IS NULL OR x.call_id = :call_id)"
    ),
    (
        "DELETE FROM exchanges WHERE caller_id = :caller_id "
        "AND (:call_id IS NULL OR call_id = :call_id)"
    ),
    "DELETE FROM forgetting",
]
"""A forget of a caller's exchanges, or of one call's (``call_id`` NULL: all), in
the transaction the caller holds: every turn row of them deleted from the index in
one statement, then the exchanges, which the turns_ad trigger leaves alone
while their caller (and call) are in ``forgetting``. Row by row, the trigger's
statements took twice as long (FTS5 writes out what it holds at every statement);
in one statement it would first index again, without its context, every exchange
whose context was deleted before it. No exchange of another call or caller has one
of these as context (``PREVIOUS_IN_CALL``). The last statement's rowcount is
nothing: read the deleted exchanges' count from the one before."""
