"""How the PostgreSQL store searches: single turns, as the SQLite store does
(``sqlite_search``). Each side of an exchange is one row of ``turns``, whose
``tsvector`` holds its own words (weight A), the words around it in the call (B: the
other side of its exchange and both sides of the exchange before it) and its day's
words (C). Words are ``search_words`` (character pairs for Chinese, Japanese, Korean
and Thai) stemmed by ``stem`` (Porter, as SQLite's FTS5), each behind the caller's
prefix (``caller_prefix``), so the GIN index keeps one list per caller and word and a
search reads only that caller's lists, however big the table. A recall counts the
question's words in the caller's turns (``caller_words``), picks the rarest ones to
select at most ``MAX_RANKED`` turns (``plan``), ranks them by BM25 in SQL
(``ranking_sql``), then keeps the best exchanges (``pick``).

Nothing the caller says is read as query syntax: lexemes are ``tsvector`` /
``tsquery`` literals, each quoted.
"""

from __future__ import annotations

import functools
import hashlib

from .dates import date_words
from .records import Exchange
from .words import ABOUT_WEIGHT, query_words, search_words, searched_by_pairs, stem

PREFIX_CHARS = 8


def caller_prefix(tenant: str, caller_id: str) -> str:
    """What every lexeme of the caller's turns starts with: 8 hex digits of the
    SHA-256 of tenant and caller id. Two callers whose prefixes collide share GIN
    lists (slower, never wrong: rows are still filtered by tenant and caller id)."""
    digest = hashlib.sha256(f"{tenant}\n{caller_id}".encode()).hexdigest()
    return digest[:PREFIX_CHARS]


INDEXED_CHARS = 20_000
"""Characters of a side (and of a question) that are indexed (searched); longer text
is kept whole but searched by its start: a ``tsvector`` holds at most 1 MB, and a
turn's holds five sides' words."""
MAX_WORD_CHARS = 100
"""Longer "words" (a pasted token) are not indexed: a lexeme holds 2 kB at most."""


def words_vector(prefix: str, text: str) -> str:
    """``text``'s search words, stemmed, each behind ``prefix``, at their positions,
    as a ``tsvector`` literal ("" for none): an exchange's ``user_words``,
    ``reply_words`` and ``day_words`` columns, from which the ``turns`` rows are made.
    Linear in the text, of which the first ``INDEXED_CHARS`` count."""
    positions: dict[str, list[str]] = {}
    words = (w for w in search_words(text[:INDEXED_CHARS]) if len(w) <= MAX_WORD_CHARS)
    for n, word in enumerate(words, 1):
        positions.setdefault(prefix + stem(word), []).append(str(n))
    return " ".join(f"{_lexeme(w)}:{','.join(p)}" for w, p in positions.items())


def exchange_words(tenant: str, e: Exchange) -> dict[str, str]:
    """The word columns of exchange ``e`` (parameters uw, rw and dw of the save):
    its sides' words and its day's (``date_words``, in the deployment's zone)."""
    prefix = caller_prefix(tenant, e.caller_id)
    return {
        "uw": words_vector(prefix, e.user_text),
        "rw": words_vector(prefix, e.assistant_text),
        "dw": words_vector(prefix, date_words(e.created_at)),
    }


def query_lexemes(prefix: str, text: str) -> list[str]:
    """What to search for when the caller says ``text``: its ``query_words`` (at
    most 24 content words, read once and no further), stemmed and behind the caller's
    prefix, each once."""
    stems = (prefix + stem(w) for w in query_words(text[:INDEXED_CHARS]))
    return list(dict.fromkeys(stems))


# PostgreSQL's parser keeps a run of Chinese, Japanese or Thai characters, or a Korean
# word with its particle, as one token, so "上海出差" is never found in "下周二我要去上海出差".
# Schema 3 searched those scripts by search_words' character pairs in a `pairs`
# column (which schema 5 replaced by the turns' words); its upgrade step still fills it.


def pair_vector(text: str) -> str | None:
    """The ``pairs`` column of schema 3 and 4 for ``text``: its character pairs
    (``search_words`` of Chinese, Japanese, Korean and Thai), each at its position,
    as a ``tsvector`` literal. None when there are none (most turns)."""
    words = search_words(text) if not text.isascii() else []
    found = [
        f"{_lexeme(w)}:{n}" for n, w in enumerate(words, 1) if searched_by_pairs(w)
    ]
    return " ".join(found) or None


def _lexeme(word: str) -> str:
    return "'" + word.replace("\\", "\\\\").replace("'", "''") + "'"


TURN_WEIGHT = 1.0
CONTEXT_WEIGHT = 0.5
DAY_WEIGHT = 1.0
"""BM25 weights of a turn's own words (A), the words around it (B) and its day's (C):
``sqlite_search``'s, so both stores rank alike."""
WEIGHTS = f"{{0.1,{DAY_WEIGHT},{CONTEXT_WEIGHT},{TURN_WEIGHT}}}"
"""``ts_rank_cd``'s weights, D (unused), C, B, A: for a one-lexeme query it returns
the sum of the weights of the lexeme's positions, the weighted term frequency."""
K1, B = 1.2, 0.75
"""BM25's term-frequency saturation and length normalization (FTS5's values)."""
MAX_RANKED = 1000
"""Most turns one search ranks (``sqlite_search.MAX_RANKED``'s bound): a caller with
thousands of exchanges whose question holds a word they say in most of them would
otherwise pay for every one."""


@functools.lru_cache(maxsize=32)
def search_sql(schema: str, lexemes: int) -> str:
    """The SQL that ranks a caller's turns for ``lexemes`` query lexemes, in one
    round trip: parameters t, c (tenant, caller id), w (``query_lexemes``), l0, l1...
    (each of them as a ``tsquery`` literal; ``search_args``), a (the side the
    question is about, 0 the caller's, 1 the reply's, -1 neither: its turns' scores
    are ``ABOUT_WEIGHT`` times higher, as ``sqlite_search.turn_order`` ranks them;
    ``search_args``), x (a call id to leave out) and n (how many turns). Returns the best turns, best first, each as its side
    (0 the caller's, 1 the reply) and its exchange (``EXCHANGE``'s columns).

    As ``sqlite_search.search_terms``: the lexemes are counted among the caller's
    turns (``caller_words``); rarest first, they select turns while the turns they
    select stay within ``MAX_RANKED``; the others, common for this caller (they cost
    the most and tell turns apart the least), only rank the selected ones. The rarest
    always selects: when it alone is in more than MAX_RANKED turns, the newest
    MAX_RANKED of them are ranked, walked back through turns_by_seq. The inverse
    document frequency is FTS5's, ln((N - n + 0.5) / (n + 0.5)), at least 1e-6, over
    the caller's N turns. Its plan does not depend on the tables' statistics (the
    test server, like many, runs without autovacuum)."""
    s = schema
    # each lexeme's weighted count in each turn (OFFSET 0: computed once per turn)
    tfs = ", ".join(
        f"ts_rank_cd('{WEIGHTS}', words, CAST(%(l{i})s AS tsquery), 0) AS f{i}"
        for i in range(lexemes)
    )
    norm = f"{K1} * ({1 - B} + {B} * size / (SELECT average FROM size))"
    score = " + ".join(
        f"(SELECT idf FROM idf WHERE ord = {i + 1}) * f{i} * {K1 + 1} / (f{i} + {norm})"
        for i in range(lexemes)
    )
    quoted = _QUOTED
    mine = "tenant = %(t)s AND caller_id = %(c)s AND call_id IS DISTINCT FROM %(x)s"
    return (
        # how many of the caller's turns hold each lexeme (one index lookup each)
        "WITH asked AS MATERIALIZED (SELECT u.ord, u.word, coalesce(w.turns, 0) AS n"
        " FROM unnest(CAST(%(w)s AS text[])) WITH ORDINALITY u(word, ord)"
        f" LEFT JOIN LATERAL (SELECT turns FROM {s}.caller_words WHERE tenant = %(t)s"
        " AND caller_id = %(c)s AND word = u.word LIMIT 1) w ON true),"
        " size AS MATERIALIZED (SELECT turns, words::float8 / greatest(turns, 1)"
        f" AS average FROM {s}.caller_sizes WHERE tenant = %(t)s AND caller_id = %(c)s),"
        " idf AS MATERIALIZED (SELECT ord, greatest(ln((z.turns - a.n + 0.5)"
        " / (a.n + 0.5))::float8, 1e-6) AS idf FROM asked a, size z),"
        # the selecting lexemes, rarest first, within MAX_RANKED turns
        " rarest AS MATERIALIZED (SELECT word, n, row_number() OVER w AS r,"
        " sum(n) OVER w AS upto FROM asked WHERE n > 0"
        " WINDOW w AS (ORDER BY n, word ROWS UNBOUNDED PRECEDING)),"
        f" how AS MATERIALIZED (SELECT CAST(string_agg({quoted}, ' | ') AS tsquery)"
        f" AS m, bool_or(r = 1 AND n > {MAX_RANKED}) AS capped FROM rarest"
        f" WHERE upto <= {MAX_RANKED} OR r = 1),"
        # the selected turns: the caller's GIN lists (the lexemes carry the caller's
        # prefix; no other condition in that scan, so no other index is chosen; a
        # prefix shared with another caller is filtered out next), at most
        # MAX_RANKED by the choice above; or, when capped, the newest that hold the
        # rarest (ts_match_vq: @@ in a form no index serves). One branch runs.
        " found AS (SELECT key, side, seq, created_at, size, words FROM (SELECT * FROM"
        f" {s}.turns WHERE words @@ (SELECT m FROM how) OFFSET 0) f WHERE {mine}"
        " AND NOT (SELECT capped FROM how) UNION ALL (SELECT key, side, seq,"
        f" created_at, size, words FROM {s}.turns WHERE {mine}"
        " AND ts_match_vq(words, (SELECT m FROM how)) AND (SELECT capped FROM how)"
        f" ORDER BY seq DESC LIMIT {MAX_RANKED})),"
        f" counted AS (SELECT key, side, seq, created_at, size, {tfs} FROM found"
        " OFFSET 0),"
        f" best AS (SELECT key, side, seq, created_at, ({score}) * (CASE side WHEN"
        f" %(a)s THEN {ABOUT_WEIGHT} ELSE 1 END) AS score FROM counted"
        " ORDER BY score DESC, seq DESC LIMIT %(n)s)"
        # their exchanges: by key and time, so that either index finds each at once
        f" SELECT b.side, e.* FROM best b, LATERAL (SELECT {EXCHANGE}"
        f" FROM {s}.exchanges WHERE tenant = %(t)s AND caller_id = %(c)s"
        " AND created_at = b.created_at AND key = b.key LIMIT 1) e"
        " ORDER BY b.score DESC, b.seq DESC"
    )


# a lexeme as a tsquery literal, in SQL (as _lexeme does in Python)
_QUOTED = r"'''' || replace(replace(word, '\', '\\'), '''', '''''') || ''''"


def search_args(lexemes: list[str], about: str | None = None) -> dict[str, object]:
    """``search_sql``'s parameters for ``lexemes`` and the side ``about`` names
    ("caller", "reply" or None: ``words.whose_turns``); the rest are the recall's."""
    side = SIDES.index(about) if about in SIDES else -1
    words = {f"l{i}": _lexeme(w) for i, w in enumerate(lexemes)}
    return {"w": lexemes, "a": side} | words


SIDES = ("caller", "reply")


def pick(
    turns: list[tuple[int, Exchange]], limit: int
) -> tuple[tuple[Exchange, ...], tuple[str, ...]]:
    """The best ``limit`` exchanges of ranked ``turns`` (side, exchange; best first),
    each with the side(s) that ranked among the best ``limit`` turns: a side found
    further down does not take room before better matches. An exchange of the same
    words as a better-ranked one is left out (a fixed greeting saved as every call's
    opening would otherwise take every place). As ``sqlite_search.search``."""
    best: dict[tuple[str, str], str] = {}  # words -> their best-ranked exchange
    for _, e in turns:
        best.setdefault((e.user_text, e.assistant_text), e.key)
    kept = set(best.values())
    exchanges: dict[str, Exchange] = {}
    sides: dict[str, set[str]] = {}
    for n, (side, e) in enumerate(t for t in turns if t[1].key in kept):
        if e.key not in sides and len(sides) < limit:
            exchanges[e.key] = e
            sides[e.key] = {SIDES[side]}
        elif e.key in sides and n < limit:
            sides[e.key].add(SIDES[side])
    return (
        tuple(exchanges.values()),
        tuple(next(iter(s)) if len(s) == 1 else "both" for s in sides.values()),
    )


EXCHANGE = "key, caller_id, call_id, user_text, assistant_text, interrupted, item_ids, created_at"
"""The columns an Exchange is read from, in the order of its fields."""


def row_exchange(row: tuple) -> Exchange:
    """An Exchange from ``EXCHANGE``'s columns."""
    key, caller_id, call_id, user, reply, interrupted, item_ids, created_at = row
    return Exchange(
        key, caller_id, call_id, user, reply, interrupted, tuple(item_ids), created_at
    )
