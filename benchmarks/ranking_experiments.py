"""Ranking experiments: lexical ideas measured against LoCoMo's evidence-in-block score
for issue 10 (0.80 wanted) and not kept. See benchmarks/README.md, "What is left".

Replays the LoCoMo dev conversations into the generated sqlite project exactly as
``locomo_recall.py`` does (its ``Bench.replay``: every session through the real
``AgentSession``), then, per question with usable evidence, ranks the caller's turns
several ways and renders each ranking with the real ``memory.format_block`` (the
question as ``query``), scored with ``locomo_recall.found_in_block``:

- **store**: ``store.recall(limit=24)``, as ``block_for`` calls it;
- **the store's search, queried here**: ``Ranker.search`` with nothing changed (the
  question's words joined by OR, the store's ORDER BY); it must score exactly as the
  store's recall, or the rows after it measure a different ranking;
- **cap**: the store's 24 (or 48) exchanges in a block of another size, to see how
  much the 3,000-character cap costs;
- **one side per line**: each exchange shown by the one side that shares more of
  the question's words (``memory.words.relevance``), both only when both share some;
- **per-call diversity**: an exchange's rank pushed down ``n`` places for each
  better-ranked exchange of the same call (multi-hop evidence lies in different calls);
- **pseudo-relevance feedback** (RM3-like; Lavrenko and Croft, SIGIR 2001): words found
  in at least ``min_docs`` of the top ``k`` turns, rare in the caller's memory (in at most
  5 % of their turns), best ``m`` by documents x idf, added to the question's words,
  which count ``w`` times;
- **speaker-aware**: a question that names one of the two speakers ranks that
  speaker's turns up (BM25 x ``boost`` for the caller's turns when it names
  ``speaker_a``, for the replies when it names ``speaker_b``), the names kept or
  removed from the query. It was measured on the old replay (questions naming the
  speakers in the third person); the honest replay asks in the caller's voice, where
  the names are gone and the store itself ranks up the turns of the person asked
  about (``memory.words.whose_turns``, in the "store" row).

Questions are asked as ``locomo_recall``'s replay asks them (``Bench.asked``: the
caller's voice by default) with its 12 facts on file, scored by its strict rule.

Tuning conversations and held-out ones (``--held-out``) are reported apart. Run from
the repository root with the dev environment:

    python benchmarks/ranking_experiments.py --data ../shared/data/locomo/locomo_dev.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import sqlite3
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import locomo_recall as L

LIMIT = 24  # memory.RECALL_EXCHANGES, as block_for asks
RARE = 0.05  # feedback words: in at most this share of the caller's turns


class Ranker:
    """The store's own turn search (``sqlite_search.search``) over one conversation's
    file, with the query words and the ORDER BY (``order``) the variant chooses."""

    def __init__(self, S: Any, memory: Any, path: Path, caller_id: str, names: tuple[str, str]):
        self.S, self.memory, self.caller_id, self.names = S, memory, caller_id, names
        self.conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        self.conn.row_factory = sqlite3.Row
        self.turns = 2 * self.conn.execute("SELECT count(*) FROM exchanges").fetchone()[0]

    def close(self) -> None:
        self.conn.close()

    def search(
        self,
        terms: list[str],
        *,
        boost_side: int | None = None,
        boost: float = 1.0,
        limit: int = LIMIT,
    ) -> tuple[tuple[Any, ...], tuple[str, ...]]:
        S = self.S
        match = " OR ".join(S._terms(terms, self.caller_id))
        order = S.TURN_RANK
        if boost_side is not None:  # bm25 is negative: a larger factor ranks higher
            order += f" * CASE WHEN (rowid & 1) = {boost_side} THEN {boost} ELSE 1.0 END"
        found: tuple[tuple[Any, ...], tuple[str, ...]] = S.search(
            self.conn, self.caller_id, match, 0, None, limit, order
        )
        return found

    def recall(self, base: Any, found: tuple[tuple[Any, ...], tuple[str, ...]]) -> Any:
        return self.memory.Recall(base.facts, base.summaries, *found)

    def count(self, word: str) -> int:
        term = self.S._terms([word], self.caller_id)[0]
        return self.conn.execute(
            "SELECT count(*) FROM turns_fts WHERE turns_fts MATCH ?", (term,)
        ).fetchone()[0]


def one_side(memory: Any, r: Any, question: str) -> Any:
    asked = memory.words.query_words(question)
    sides = []
    for e, s in zip(r.exchanges, r.sides or ("both",) * len(r.exchanges), strict=True):
        if s == "both" and e.user_text and e.assistant_text:
            relevance = memory.words.relevance
            c, a = relevance(asked, e.user_text), relevance(asked, e.assistant_text)
            s = "both" if c and a else ("caller" if c >= a else "reply")
        sides.append(s)
    return memory.Recall(r.facts, r.summaries, r.exchanges, tuple(sides))


def diverse(memory: Any, r: Any, places: int) -> Any:
    seen: Counter[str] = Counter()
    keyed = []
    for rank, (e, s) in enumerate(zip(r.exchanges, r.sides, strict=True)):
        keyed.append((rank + places * seen[e.call_id], rank, e, s))
        seen[e.call_id] += 1
    keyed.sort(key=lambda k: (k[0], k[1]))
    return memory.Recall(
        r.facts, r.summaries, tuple(k[2] for k in keyed), tuple(k[3] for k in keyed)
    )


def feedback(ranker: Ranker, r: Any, question: str, k: int, m: int, w: int, min_docs: int) -> Any:
    memory = ranker.memory
    asked = memory.words.query_words(question)
    docs = []
    for e, s in list(zip(r.exchanges, r.sides, strict=True))[:k]:
        caller, reply = memory.block.shown_sides(e, s)
        text = f"{e.user_text if caller else ''} {e.assistant_text if reply else ''}"
        docs.append(set(memory.words.query_words(text, limit=10_000)))
    df = Counter(word for d in docs for word in d if word not in asked)
    scored = []
    for word, n in df.items():
        if n < min_docs or word.isdigit():
            continue
        rows = ranker.count(word)
        if 0 < rows <= RARE * ranker.turns:
            scored.append((n * math.log(ranker.turns / rows), word))
    added = [word for _, word in sorted(scored, reverse=True)[:m]]
    if not added:
        return r
    return ranker.recall(r, ranker.search(asked * w + added))


def speaker(ranker: Ranker, r: Any, question: str, boost: float, remove: bool) -> Any:
    caller, agent = ranker.names
    asked = ranker.memory.words.query_words(question)
    side = None
    if (caller in asked) != (agent in asked):
        side = 0 if caller in asked else 1
    if remove:
        asked = [w for w in asked if w not in (caller, agent)] or asked
    return ranker.recall(r, ranker.search(asked, boost_side=side, boost=boost))


# (name, what is changed, its setting), in the order of the printed table
VARIANTS: list[tuple[str, str, tuple[float, ...]]] = [
    ("store's recall (today)", "store", ()),
    ("the store's search, queried here (must equal the row above)", "queried", ()),
    ("no cap: the store's 24", "cap", (24, 1_000_000)),
    ("no cap: the store's 48", "cap", (48, 1_000_000)),
    ("cap 3600", "cap", (24, 3_600)),
    ("cap 4500", "cap", (24, 4_500)),
    ("one side per line", "one side", ()),
    *((f"per-call diversity {p}", "diverse", (p,)) for p in (1, 2, 4)),
    *(
        (f"feedback k{k} m{m} w{w} min_docs{d}", "feedback", (k, m, w, d))
        for k, m, w, d in ((5, 6, 2, 2), (10, 6, 3, 3), (10, 10, 3, 2))
    ),
    ("speaker-aware: names removed, no boost", "speaker", (1.0, 1)),
    *((f"speaker-aware: boost {b}, names kept", "speaker", (b, 0)) for b in (1.3, 1.6, 2.0)),
]


def ranked(
    way: str, setting: tuple[float, ...], ranker: Ranker, q: dict[str, Any], text: str
) -> tuple[Any, int]:
    """The recall one variant gives for question ``text``, and the block cap (characters)."""
    memory, r, cap = ranker.memory, q["r24"], ranker.memory.MAX_BLOCK_CHARS
    if way == "queried":
        r = ranker.recall(r, ranker.search(memory.words.query_words(text)))
    elif way == "cap":
        r, cap = q[f"r{int(setting[0])}"], int(setting[1])
    elif way == "one side":
        r = one_side(memory, r, text)
    elif way == "diverse":
        r = diverse(memory, r, int(setting[0]))
    elif way == "feedback":
        k, m, w, d = (int(x) for x in setting)
        r = feedback(ranker, r, text, k, m, w, d)
    elif way == "speaker":
        r = speaker(ranker, r, text, setting[0], bool(setting[1]))
    return r, cap


async def run(args: argparse.Namespace) -> dict[str, Any]:
    records = json.loads(args.data.read_text())
    held_out = set(args.held_out.split(","))
    bench = L.sqlite_bench("ranking-experiments-", held_out)
    memory = bench.memory
    # the generated project's, on sys.path since Bench
    from memory import sqlite_search as S
    from memory import sqlite_store

    scores: L.Scores = {}
    async for record, c, caller_id, store in bench.replayed(records[: args.conversations or None]):
        talk = record["conversation"]
        names = (talk["speaker_a"].lower(), talk["speaker_b"].lower())
        path = sqlite_store.path_of(bench.store_url(c.sample_id))
        ranker = Ranker(S, memory, path, caller_id, names)
        now = c.sessions[-1].at + 86400.0  # questions a day after the last session
        group = "held out" if c.sample_id in held_out else "tuning"
        for qa, evidence in L.scored_questions(c):
            text = bench.asked(c, qa)
            q = {
                "r24": await store.recall(caller_id, text, limit=LIMIT),
                "r48": await store.recall(caller_id, text, limit=2 * LIMIT),
            }
            for name, way, setting in VARIANTS:
                recall, cap = ranked(way, setting, ranker, q, text)
                block = memory.format_block(recall, now=now, query=text, max_chars=cap)
                found = L.evidence_share(c, evidence, block, text)
                scores.setdefault((name, group, int(qa["category"])), []).append(found)
        ranker.close()
    return L.ranking_table(scores, [name for name, _, _ in VARIANTS])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, type=Path, help="path to locomo_dev.json")
    parser.add_argument("--conversations", type=int, default=0, help="only the first N")
    parser.add_argument("--held-out", default="conv-26,conv-48", help="kept out of tuning")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    L.print_ranking_table(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
