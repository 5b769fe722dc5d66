"""How the PostgreSQL store searches: the words of what the caller said as a
``tsquery``, the ``pairs`` column that holds Chinese, Japanese, Korean and Thai text
as character pairs, and the SQL that ranks a caller's exchanges by BM25.

Nothing the caller says is read as query syntax: words are runs of letters and
digits, each quoted, and pairs are ``tsvector`` / ``tsquery`` literals.
"""

from __future__ import annotations

import re

from .words import STOPWORDS, query_words, search_words, searched_by_pairs

MAX_QUERY_TERMS = 24
K1, B = 1.2, 0.75
"""BM25's term-frequency saturation and length normalization (the usual values)."""


def query_terms(text: str) -> list[str]:
    """The content words of what the caller said, lower-cased, at most
    ``MAX_QUERY_TERMS``. A word is a run of letters and digits, so nothing the caller
    says is read as tsquery syntax. Linear in the text: words are read one at a time
    and reading stops at the limit (a 1 MB turn of distinct words is read up to its
    24th content word)."""
    terms: dict[str, None] = {}  # a dict keeps the order and finds repeats at once
    for match in _TERM_RE.finditer(text):
        word = match.group().lower()
        if word not in STOPWORDS and len(word) > 1:
            terms[word] = None
            if len(terms) == MAX_QUERY_TERMS:
                break
    return list(terms)


_TERM_RE = re.compile(r"[^\W_]+")


def tsquery(terms: list[str] | str) -> str | None:
    """What the caller said as a ``to_tsquery`` argument: its ``query_terms`` (or
    the text, read with them), each quoted, joined by ``|`` (OR). None when nothing
    is left to search for."""
    if isinstance(terms, str):
        terms = query_terms(terms)
    return " | ".join(f"'{t}'" for t in terms) or None


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


def pair_query(pairs: list[str] | str) -> str | None:
    """What the caller said as a ``tsquery`` literal over the ``pairs`` column: its
    ``query_pairs`` (or the text, read with them) joined by ``|``. None when there
    are none."""
    if isinstance(pairs, str):
        pairs = query_pairs(pairs)
    return " | ".join(_lexeme(w) for w in pairs) or None


def _lexeme(word: str) -> str:
    return "'" + word.replace("\\", "\\\\").replace("'", "''") + "'"


EXCHANGE = "key, caller_id, call_id, user_text, assistant_text, interrupted, item_ids, created_at"
"""The columns an Exchange is read from, in the order of its fields."""

# The (tenant, caller_id) key finds the caller's rows; @@ keeps those that match
# a word (q) or a character pair (p). They are ranked by BM25 over the caller's
# own exchanges: each query lexeme (w: its words, stemmed; pw: its pairs) weighs
# by its inverse document frequency among them (caller_words, caller_sizes), its
# count in the exchange saturates (K1), and long exchanges count less (B).
SEARCH = (
    "WITH terms AS MATERIALIZED (SELECT w.word,"
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
    " ORDER BY score DESC NULLS LAST, created_at DESC LIMIT %(n)s"
)
"""The caller's best exchanges, best first: parameters t (tenant), c (caller id), q
and p (``tsquery`` and ``pair_query`` of what was said; None: nothing to match), w
(``query_terms`` joined by spaces), pw (``query_pairs``), x (a call id to leave out)
and n (how many); ``{s}`` is the schema."""
