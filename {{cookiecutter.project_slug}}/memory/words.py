"""Search words: what a search matches on, in every language, and how relevant a
text is to what the caller said.

Words for languages written with spaces; overlapping pairs of characters for
Chinese, Japanese, Korean and Thai (no spaces between words). Relevance compares
stems from the Snowball English stemmer (the Porter family FTS5 uses).
"""

from __future__ import annotations

import functools
import itertools
import re
import unicodedata
from collections.abc import Sequence

import snowballstemmer  # type: ignore[import-untyped, import-not-found, unused-ignore]

from .text import spans

# Function words that say nothing about what to look up. Dropping them from a query
# keeps a ranking from preferring exchanges that say "what" or "you" often.
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been
    before being below between both but by can could did do does doing down during each
    few for from further had has have having he her here hers herself him himself his
    how i if in into is it its itself just let me more most my myself no nor not now of
    off on once only or other our ours ourselves out over own same she should so some
    such than that the their theirs them themselves then there these they this those
    through to too under until up very was we were what when where which while who whom
    why will with would you your yours yourself yourselves tell told said say know
    remember recall hey hi hello yes yeah okay ok oh um uh please thanks thank like
    really also get got go going went one ever""".split()  # noqa: SIM905 (reads as text)
)
MAX_QUERY_WORDS = 24

# Scripts written without spaces between words (Chinese, Japanese kana, Thai, Lao,
# Khmer, Myanmar) and Korean, whose words carry particles ("부산에" = "부산" + "에"):
# searched by overlapping pairs of characters, so "上海出差" is found by
# "我上海出差的事情" and "부산" by "부산에". Character bigrams are the usual
# dictionary-free way to index CJK text (Lucene's CJKBigramFilter does the same).
_DENSE = (
    "\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u1100-\u11ff\u3040-\u30ff\u3130-\u318f"
    "\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002fa1f"
)


def _marks() -> str:
    # Combining marks (Unicode categories M*) in the Basic Multilingual Plane, as
    # regex ranges: Thai vowel signs and Devanagari matras are marks, and ``\w``
    # would cut words at them.
    ranges: list[tuple[int, int]] = []
    for cp in range(0x300, 0x10000):
        if unicodedata.category(chr(cp))[0] == "M":
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1] = (ranges[-1][0], cp)
            else:
                ranges.append((cp, cp))
    return "".join(f"{chr(a)}-{chr(b)}" for a, b in ranges)


_MARKS = _marks()
_WORD_RE = re.compile(rf"[{_DENSE}]+|(?:[^\W_{_DENSE}]|[{_MARKS}])+")
_DENSE_RE = re.compile(rf"[{_DENSE}]")
_ASCII_WORD_RE = re.compile(r"[a-z0-9]+")
_CHARACTER_RE = re.compile(rf".[{_MARKS}]*", re.DOTALL)  # a letter and its marks
# Characters no search word holds, where a long text is cut into pieces (``spans``):
# an ASCII text's other than letters and digits; any text's outside every word
# (neither a word character, a mark nor a dense script's, or "_"); in a dense run,
# any but a mark (a character begins there).
_ASCII_GAP_RE = re.compile(r"[^a-z0-9]")
_GAP_RE = re.compile(rf"_|[^\w{_MARKS}{_DENSE}]")
_NOT_MARK_RE = re.compile(rf"[^{_MARKS}]")


def search_words(text: str) -> list[str]:
    """The words of ``text`` that a search matches on, in order, lower-cased: runs of
    letters, digits and combining marks, and for the scripts in ``_DENSE`` every pair
    of neighbouring characters, a character being a letter with its marks (a lone
    character stands for itself). Text is compared in NFKC form, so full-width and
    half-width forms match the ordinary ones. Stopwords are kept (see
    ``query_words``). A long text is read in pieces (``limits.PIECE_CHARS``), so
    no single pass holds the GIL long. Raises nothing; "" gives []."""
    words: list[str] = []
    if text.isascii():  # most turns: the same words, found five times faster
        lowered = text.lower()
        for start, end in spans(lowered, _ASCII_GAP_RE):
            words += _ASCII_WORD_RE.findall(lowered, start, end)
        return words
    normal = unicodedata.normalize("NFKC", text).lower()
    for start, end in spans(normal, _GAP_RE):
        for run in _WORD_RE.findall(normal, start, end):
            if not _DENSE_RE.match(run):
                words.append(run)
                continue
            chars: list[str] = []
            for at, to in spans(run, _NOT_MARK_RE):
                chars += _CHARACTER_RE.findall(run, at, to)
            if len(chars) == 1:
                words.append(run)
            words.extend(a + b for a, b in itertools.pairwise(chars))
    return words


def searched_by_pairs(word: str) -> bool:
    """Whether a search word (``search_words``) is a character or a pair of characters
    of a script searched by pairs (Chinese, Japanese, Korean, Thai...), not a word."""
    return _DENSE_RE.match(word) is not None


def query_words(text: str, limit: int = MAX_QUERY_WORDS) -> list[str]:
    """What to search for when the caller says ``text``: its distinct search words
    (``search_words``) without stopwords and one-letter words, at most ``limit``."""
    kept: list[str] = []
    for word in search_words(text):
        if (
            word in STOPWORDS
            or word in kept
            or (len(word) < 2 and not _DENSE_RE.match(word))
        ):
            continue
        kept.append(word)
        if len(kept) == limit:
            break
    return kept


def relevance(asked: list[str], text: str) -> int:
    """How many of the query's words (``query_words``) ``text`` holds. Words are
    compared by their stems (``stem``: "booking" and "booked" are both "book", "play"
    and "plays" both "plai"), and words of 5 letters or more also when they or their
    stems begin alike ("allergic" and "allergy" share "aller", "dancers" and "dance"
    share "dance", which Porter stems apart), so every backend's results are ranked
    alike. Linear in the text: only words that begin like an asked word (their first
    3 letters) are stemmed, so a huge stored turn costs one pass over its words."""
    roots = [stem(w) for w in asked]
    heads = {w[:3] for w in asked} | {r[:3] for r in roots}
    words = {w for w in search_words(text) if w[:3] in heads}
    stems = {stem(w) for w in words}
    starts = {w[:5] for w in words | stems if len(w) >= 5 and not _DENSE_RE.match(w)}
    found = 0
    for word, root in zip(asked, roots, strict=True):
        found += root in stems or any(
            len(w) >= 5 and w[:5] in starts for w in (word, root)
        )
    return found


def matched_spans(asked: list[str], text: str) -> list[tuple[int, int, int]]:
    """Where ``text`` says the query's words (``query_words``): ``(start, end, i)``
    character offsets of each word of ``text`` that matches ``asked[i]`` by the rule
    of ``relevance``, in order. Words of the scripts searched by pairs are not
    placed (their matches are not words), nor is text whose lower-case form has
    another length (a rare letter such as "İ"): both give []. Linear in the text."""
    lowered = text.lower()
    if not asked or len(lowered) != len(text):
        return []
    heads, where, starts = _matcher(tuple(asked))
    spans = []
    for start, end in (
        _ascii_words(lowered, heads) if lowered.isascii() else _words(lowered)
    ):
        word = lowered[start:end]
        if word[:3] not in heads or _DENSE_RE.match(word):
            continue
        root = stem(word)
        i = where.get(root)
        if i is None and len(word) >= 5:
            i = starts.get(word[:5], starts.get(root[:5]) if len(root) >= 5 else None)
        if i is not None:
            spans.append((start, end, i))
    return sorted(spans)


def _ascii_words(text: str, heads: frozenset[str]) -> list[tuple[int, int]]:
    # The words of ASCII ``text`` that begin with one of ``heads``, found by str.find
    # (a scan in C per head: most of a long turn's words begin like no asked word).
    found = []
    for head in heads:
        at = text.find(head)
        while at >= 0:
            if at == 0 or not text[at - 1].isalnum():
                end = at + len(head)
                while end < len(text) and text[end].isalnum():
                    end += 1
                found.append((at, end))
            at = text.find(head, at + 1)
    return found


def _words(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in _WORD_RE.finditer(text)]


@functools.lru_cache(maxsize=64)
def _matcher(
    asked: tuple[str, ...],
) -> tuple[frozenset[str], dict[str, int], dict[str, int]]:
    # What matched_spans compares with, once per query (a block places every line's
    # words with the same one): the asked words' first 3 letters, stem -> index,
    # first 5 letters -> index.
    roots = [stem(w) for w in asked]
    heads = frozenset({w[:3] for w in asked} | {r[:3] for r in roots})
    starts = {
        x[:5]: i
        for i, (w, r) in enumerate(zip(asked, roots, strict=True))
        for x in (r, w)
        if len(x) >= 5
    }
    where = {r: i for i, r in reversed(list(enumerate(roots)))}
    return heads, where, starts


FIRST_PERSON = frozenset({"i", "me", "my", "mine", "myself"})
SECOND_PERSON = frozenset({"you", "your", "yours", "yourself"})
# Ways of asking that name the agent or the caller without being about them: "do
# you remember what I said", "can you tell me", "did I tell you", "remind me".
_ASIDES = re.compile(
    r"\b(?:(?:do|did|can|could|would|will|have)\s+you\s+(?:still\s+)?"
    r"(?:remember|recall|know|tell|think|say|mind)(?:\s+me)?|"
    r"you\s+(?:remember|know|recall)|"
    r"(?:tell|told|remind|ask|asked|show)\s+(?:me|you))\b",
    re.IGNORECASE,
)
MAX_ABOUT_CHARS = 2000
"""How much of what the caller said ``whose_turns`` reads (characters)."""


ABOUT_WEIGHT = 1.6
"""How much better a turn of the person the question is about ranks (its BM25
score times this; ``sqlite_search.turn_order``, ``postgres_search.search_sql``). Chosen on LoCoMo's tuning conversations
(benchmarks/README.md)."""


def whose_turns(text: str, caller_names: Sequence[str] = ()) -> str | None:
    """Whose words the caller's ``text`` asks about: "caller" when it speaks of the
    caller only (I, me, my, or a word of ``caller_names``, e.g. their name fact),
    "reply" when of the agent only (you, your), else None (both, neither, or words
    of another language: English pronouns only). Asides that name someone without
    being about them ("do you remember", "tell me") are left out first. Names are
    compared as search words. (The agent has no name of its own in this kit:
    AGENT_NAME is LiveKit's dispatch name.)"""
    said = _ASIDES.sub(" ", text[:MAX_ABOUT_CHARS])
    words = set(search_words(said))
    named = {w for n in caller_names for w in search_words(n) if len(w) > 1}
    caller = bool(words & FIRST_PERSON or words & named)
    other = bool(words & SECOND_PERSON)
    if caller == other:
        return None
    return "caller" if caller else "reply"


_PORTER = snowballstemmer.stemmer("porter")
MAX_STEMMED_CHARS = 40
"""Longer "words" (a pasted token, a run of letters) are kept as they are: no word of
a language has a suffix worth the time Porter takes on 100,000 letters (75 ms)."""


@functools.lru_cache(maxsize=8192)
def stem(word: str) -> str:
    """A search word's stem by the Porter algorithm ("booking", "booked" -> "book";
    "play", "plays" -> "plai"), the one SQLite's FTS5 ``porter`` tokenizer applies to
    every word, from the Snowball project's ``snowballstemmer``; words of other
    scripts are kept as they are."""
    if word.isascii() and len(word) <= MAX_STEMMED_CHARS:
        return str(_PORTER.stemWord(word))
    return word
