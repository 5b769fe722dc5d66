"""How the SQLite store searches: each caller's own FTS5 terms (``caller_prefix``),
the query built from what the caller said (``search_terms``), and the ranking SQL
of recall (``search``: single turns of ``turns_fts``, see
``sqlite_schema._index_turns``, then the best exchanges' rows).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from typing import Any

from .records import Exchange
from .words import ABOUT_WEIGHT, query_words, search_words

CALLER_PREFIX_DIGITS = 12


def caller_prefix(caller_id: str) -> str:
    """What every indexed word of the caller starts with: 12 decimal digits from the
    SHA-256 of the caller id. Each caller's words are then their own FTS5 terms, so a
    search reads only that caller's rows and BM25 weighs words by how common they
    are in that caller's memory; the time a recall takes follows the caller, not the
    file. Digits only: the porter stemmer treats them as consonants, so a prefixed
    word stems like the word alone. (Two callers whose prefixes collide share terms;
    rows are still filtered by caller id.)"""
    number = int.from_bytes(hashlib.sha256(caller_id.encode()).digest()[:8], "big")
    return f"{number % 10**CALLER_PREFIX_DIGITS:0{CALLER_PREFIX_DIGITS}d}"


def indexed_words(caller_id: str, text: str) -> str:
    """The text FTS5 indexes for ``text`` of ``caller_id``: its search words
    (``search_words``: words, and character pairs for Chinese, Japanese,
    Korean and Thai), each behind the caller's prefix, joined by spaces."""
    prefix = caller_prefix(caller_id)
    return " ".join(prefix + w for w in search_words(text))


def fts_query(text: str, caller_id: str) -> str | None:
    """Turn what the caller said into an FTS5 query over ``caller_id``'s words: its
    content words (``query_words``), each behind the caller's prefix and
    quoted, joined by OR (so no word is ever read as FTS5 syntax). None when nothing
    is left to search for."""
    return " OR ".join(_terms(query_words(text), caller_id)) or None


def _terms(words: list[str], caller_id: str) -> list[str]:
    prefix = caller_prefix(caller_id)
    return [f'"{prefix}{w}"' for w in words]


MAX_RANKED = 1000
"""Most rows one search ranks with BM25. FTS5 scores every matched row before it
sorts, so a caller with thousands of exchanges whose question holds a word they say
in most of them would pay for all of them (about 0.6 us of CPU each); which rows are
matched is chosen within this bound instead (``search_terms``)."""


def search_terms(
    conn: sqlite3.Connection, text: str, caller_id: str
) -> tuple[str | None, int]:
    """The FTS5 query that searches ``caller_id``'s turns (``turns_fts``, where recall
    ranks) for ``text`` (None when none of its words is in them), and the lowest
    rowid worth ranking (0: all).

    The query's words (``query_words``) are counted in the caller's own rows
    (each caller's words are their own terms, see ``caller_prefix``; a count stops at
    MAX_RANKED + 1, so counting is bounded too). Rarest first, words *select* rows
    while the rows they select together stay within MAX_RANKED; the others, common in
    this caller's memory (a low inverse document frequency: they cost the most and
    tell rows apart the least), only *rank* the selected rows:
    ``(s1 OR s2) AND (s1 OR s2 OR c1 OR c2)`` (BM25 counts each selecting word twice).
    The rarest word is always selecting, so a question of only common words still
    finds something: then the newest MAX_RANKED rows that hold it are ranked (rowids
    grow with time), found by walking the index without scoring."""
    terms = _terms(query_words(text), caller_id)
    if not terms:
        return None, 0
    capped = (
        "(SELECT count(*) FROM (SELECT 1 FROM turns_fts WHERE turns_fts MATCH ? "
        f"LIMIT {MAX_RANKED + 1}))"
    )
    counts = conn.execute(
        f"SELECT {', '.join([capped] * len(terms))}", terms
    ).fetchone()
    select: list[str] = []
    rank: list[str] = []
    rows = 0
    for n, i in sorted((n, i) for i, n in enumerate(counts) if n):
        if select and rows + n > MAX_RANKED:
            rank.append(terms[i])
        else:
            select.append(terms[i])
            rows += n
    if not select:
        return None, 0
    selecting = " OR ".join(select)
    floor = 0
    if rows > MAX_RANKED:
        oldest = conn.execute(
            "SELECT rowid FROM turns_fts WHERE turns_fts MATCH ? "
            "ORDER BY rowid DESC LIMIT 1 OFFSET ?",
            (selecting, MAX_RANKED - 1),
        ).fetchone()
        floor = oldest[0] if oldest else 0
    if rank:
        return f"({selecting}) AND ({selecting} OR {' OR '.join(rank)})", floor
    return selecting, floor


# Each entry moves a file from version N to N+1; `PRAGMA user_version` holds N: SQL,


def caller_key(caller_id: str) -> str:
    """One FTS token per caller: 'k' + 20 hex digits of the id's SHA-256 (a caller
    id's '@', '+' and '.' would otherwise split it into several tokens)."""
    return "k" + hashlib.sha256(caller_id.encode()).hexdigest()[:20]


TURN_WEIGHT = 1.0
CONTEXT_WEIGHT = 0.5
DAY_WEIGHT = 1.0
"""BM25 weights of a turn's own words, of the turns next to it and of its day's
words (``turns_fts``; see ``sqlite_schema._index_turns``)."""
TURN_RANK = f"bm25(turns_fts, {TURN_WEIGHT}, {CONTEXT_WEIGHT}, {DAY_WEIGHT})"
"""How recall orders the turns it matched (FTS5's bm25: lower is better)."""
SIDES = ("caller", "reply")


def turn_order(about: str | None) -> str:
    """The ORDER BY of recall's turn search: ``TURN_RANK``, with the turns of the
    side ``about`` names ("caller" or "reply", from ``words.whose_turns``) ranked up
    by ``ABOUT_WEIGHT`` (bm25 is negative: lower is better)."""
    if about not in SIDES:
        return TURN_RANK
    side = SIDES.index(about)
    return f"{TURN_RANK} * (CASE rowid & 1 WHEN {side} THEN {ABOUT_WEIGHT} ELSE 1 END)"


ROWS_FOUND = """SELECT rowid AS rid, * FROM exchanges
    WHERE rowid IN ({}) AND +caller_id = ? AND call_id IS NOT ?"""
"""The rows a search found, by rowid. "+caller_id" keeps SQLite from using the
exchanges_by_caller index here: where ANALYZE saw few rows per caller, it would walk
all of a big caller's rows (10,000: twice the time of the whole search) to find 16."""


def search(
    conn: sqlite3.Connection,
    caller_id: str,
    match: str,
    floor: int,
    exclude_call_id: str | None,
    limit: int,
    order: str = TURN_RANK,
) -> tuple[tuple[Exchange, ...], tuple[str, ...]]:
    # Rank turns in the index alone, by ``order`` (TURN_RANK; the kit's
    # benchmarks/ranking_experiments.py tries others; rowid = exchange rowid * 2 +
    # side; rows from ``floor`` on, see search_terms), then read only the best
    # exchanges' rows (not every matched row) and drop the current call's; ask for
    # more if that left fewer than ``limit`` exchanges. Each exchange keeps the sides that ranked
    # before the limit was reached. An exchange of the same words as a better-ranked
    # one is left out (a fixed greeting saved as every call's opening would otherwise
    # take every place).
    want = limit * 3
    while True:
        turns = [
            r[0]
            for r in conn.execute(
                f"""SELECT rowid FROM turns_fts WHERE turns_fts MATCH ? AND rowid >= ?
                    ORDER BY {order} LIMIT ?""",
                (match, floor, want),
            )
        ]
        ids = list(dict.fromkeys(t >> 1 for t in turns))
        rows = {
            r["rid"]: r
            for r in conn.execute(
                ROWS_FOUND.format(",".join("?" * len(ids))),
                (*ids, caller_id, exclude_call_id),
            )
        }
        best: dict[tuple[str, str], int] = {}  # words -> their best-ranked exchange
        for t in turns:
            if t >> 1 in rows:
                row = rows[t >> 1]
                best.setdefault((row["user_text"], row["assistant_text"]), t >> 1)
        kept = set(best.values())
        sides: dict[int, set[str]] = {}
        for n, t in enumerate(t for t in turns if t >> 1 in kept):
            # an exchange shows the sides among the best ``limit`` turns: a side found
            # further down does not take room before better matches
            if t >> 1 not in sides and len(sides) < limit:
                sides[t >> 1] = {SIDES[t & 1]}
            elif t >> 1 in sides and n < limit:
                sides[t >> 1].add(SIDES[t & 1])
        if len(sides) == limit or len(turns) < want:
            return (
                tuple(row_to_exchange(rows[i]) for i in sides),
                tuple(next(iter(s)) if len(s) == 1 else "both" for s in sides.values()),
            )
        want *= 4


def row_to_exchange(r: sqlite3.Row) -> Exchange:
    """An ``exchanges`` row as the Exchange it holds."""
    return Exchange(
        key=r["key"],
        caller_id=r["caller_id"],
        call_id=r["call_id"],
        user_text=r["user_text"],
        assistant_text=r["assistant_text"],
        interrupted=bool(r["interrupted"]),
        item_ids=_item_ids(r["item_ids"]),
        created_at=r["created_at"],
    )


def _item_ids(stored: Any) -> tuple[str, ...]:
    # LiveKit's item ids, kept for reference only: a value that is no JSON list (a
    # hand edit, another program) must not fail the recall of every other row.
    try:
        ids = json.loads(stored)
    except (TypeError, ValueError):
        return ()
    return tuple(str(i) for i in ids) if isinstance(ids, list) else ()
