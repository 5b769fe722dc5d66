"""Cost benchmark: does one caller's recall (sqlite) cost what that caller has stored,
and not what the whole file holds?

Imports the template's own memory.py and sqlite_store.py (copied unrendered into
generated projects). One generated SQLite file (a temporary directory; thrown away),
grown to 10k, 100k and 1M exchanges. At each size, side by side in one process:

- **caller A** (100 exchanges, present from the start): ``store.recall`` as
  ``CallMemory.block_for`` calls it (limit 8, the current call left out);
- **caller B** (10,000 exchanges, added with the 100k fill): the block itself,
  ``CallMemory.block_for`` (recall + ranking + formatting; a new turn each time, so
  nothing is cached);
- **bare FTS5** for both: the store's previous design, a plain FTS5 table over the raw
  text with a ``caller_key`` column (``caller_key:k AND (w1 OR w2 ...)``, ``ORDER BY
  bm25 LIMIT 8``), filled with the same rows, queried on the same connection type.

Each question names three content words of one of the caller's own exchanges,
padded with function words as a spoken question is. Text: scale.py's generator
(Zipf-distributed words over a 30k-word vocabulary). Other rows belong to 10,000
other callers. p50 / p95 over --recalls recalls each, after a warm-up.

Usage:
    uv run python benchmarks/cost.py [--sizes 10000,100000,1000000] [--out results.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "{{cookiecutter.project_slug}}"
sys.path[:0] = [str(TEMPLATE), str(TEMPLATE / "memory_backends/sqlite"), str(ROOT / "benchmarks")]

import memory  # noqa: E402
import sqlite_store  # noqa: E402
from scale import FUNCTION_WORDS, Text, caller_of, percentile  # noqa: E402

CALLER_A = "caller-a@example.com"  # 100 exchanges
CALLER_B = "caller-b@example.com"  # 10,000 exchanges
BARE_FTS = """CREATE VIRTUAL TABLE bare_fts USING fts5 (
    caller_key, user_text, assistant_text, tokenize='porter unicode61 remove_diacritics 2')"""


def exchange(text: Text, caller: str, n: int) -> memory.Exchange:
    return memory.Exchange(
        key=memory.exchange_key(caller, f"bulk-{n}"),
        caller_id=caller,
        call_id=f"call-{n // 12}",
        user_text=text.sentence(6, 30),
        assistant_text=text.sentence(4, 25),
        item_ids=(f"bulk-{n}",),
        created_at=1.7e9 + n,
    )


def load(path: Path, batch: list[memory.Exchange]) -> None:
    """Into the store's table with the words a save indexes (sqlite_store.indexed_words;
    its triggers keep the index) and into the bare FTS5 table, in one transaction."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    conn.executemany(
        """INSERT INTO exchanges (key, caller_id, caller_key, call_id, user_text,
           assistant_text, interrupted, item_ids, created_at, user_words, reply_words)
           VALUES (?, ?, ?, ?, ?, ?, 0, '[]', ?, ?, ?)""",
        [
            (
                e.key,
                e.caller_id,
                sqlite_store.caller_key(e.caller_id),
                e.call_id,
                e.user_text,
                e.assistant_text,
                e.created_at,
                sqlite_store.indexed_words(e.caller_id, e.user_text),
                sqlite_store.indexed_words(e.caller_id, e.assistant_text),
            )
            for e in batch
        ],
    )
    conn.executemany(
        "INSERT INTO bare_fts (caller_key, user_text, assistant_text) VALUES (?, ?, ?)",
        [(sqlite_store.caller_key(e.caller_id), e.user_text, e.assistant_text) for e in batch],
    )
    conn.execute("COMMIT")
    conn.close()


def question(text_of: memory.Exchange, rng: random.Random) -> str:
    words = [w for w in text_of.user_text.split() if w not in FUNCTION_WORDS]
    return "do you remember what i said about " + " and ".join(
        rng.sample(words, min(3, len(words)))
    )


def bare_query(conn: sqlite3.Connection, caller: str, q: str) -> list[int]:
    words = [w for w in memory.query_words(q)]
    match = " OR ".join(f'"{w}"' for w in words)
    rows = conn.execute(
        """SELECT rowid FROM bare_fts WHERE bare_fts MATCH ?
           ORDER BY bm25(bare_fts, 0.0, 1.0, 1.0) LIMIT 8""",
        (f"caller_key:{sqlite_store.caller_key(caller)} AND ({match})",),
    )
    return [r[0] for r in rows]


def ms(values: list[float]) -> dict[str, float]:
    return {"p50": percentile(values, 50) * 1000, "p95": percentile(values, 95) * 1000}


async def measure(
    path: Path, own: dict[str, list[memory.Exchange]], rng: random.Random, recalls: int
) -> dict[str, Any]:
    store = sqlite_store.SQLiteStore.open(path)
    bare = sqlite3.connect(path)
    out: dict[str, Any] = {}
    try:
        for caller, rows in own.items():
            asked = [question(rng.choice(rows), rng) for _ in range(recalls + 20)]
            for q in asked[:20]:  # warm up: connections, page cache
                await store.recall(caller, q, exclude_call_id="now")
                bare_query(bare, caller, q)
            call = memory.CallMemory(store, caller, "now")
            call.profile = await store.profile(caller)
            recall_t, block_t, bare_t = [], [], []
            for turn, q in enumerate(asked[20:]):
                t = time.perf_counter()
                await store.recall(caller, q, exclude_call_id="now")
                recall_t.append(time.perf_counter() - t)
                t = time.perf_counter()
                await call.block_for(q, turn=turn)
                block_t.append(time.perf_counter() - t)
                t = time.perf_counter()
                bare_query(bare, caller, q)
                bare_t.append(time.perf_counter() - t)
            out[caller] = {
                "exchanges": len(rows),
                "store_recall_ms": ms(recall_t),
                "block_for_ms": ms(block_t),
                "bare_fts5_ms": ms(bare_t),
            }
    finally:
        bare.close()
        await store.close()
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    text = Text(rng)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="memory-cost-") as tmp:
        path = Path(tmp) / "memory.db"
        sqlite_store.SQLiteStore.open(path)  # the schema, made by the store itself
        conn = sqlite3.connect(path)
        conn.execute(BARE_FTS)
        conn.close()
        own: dict[str, list[memory.Exchange]] = {
            CALLER_A: [exchange(text, CALLER_A, n) for n in range(100)]
        }
        load(path, own[CALLER_A])
        stored, n = 100, 100
        for size in sizes:
            started = time.perf_counter()
            if CALLER_B not in own and size >= 100 * 1000:
                own[CALLER_B] = [exchange(text, CALLER_B, 10**7 + i) for i in range(10_000)]
                load(path, own[CALLER_B])
                stored += 10_000
            while stored < size:
                step = min(50_000, size - stored)
                load(
                    path,
                    [exchange(text, caller_of(rng.randrange(10_000)), n + i) for i in range(step)],
                )
                stored, n = stored + step, n + step
            conn = sqlite3.connect(path)
            conn.execute("ANALYZE")
            conn.close()
            fill = time.perf_counter() - started
            row = {
                "size": stored,
                "fill_s": round(fill, 1),
                "file_mib": round(sum(p.stat().st_size for p in path.parent.iterdir()) / 2**20),
                "callers": await measure(path, own, rng, args.recalls),
            }
            results.append(row)
            print(json.dumps(row), file=sys.stderr)
    return {
        "benchmark": "cost",
        "machine": {
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "platform": platform.platform(),
        },
        "recalls": args.recalls,
        "results": results,
    }


def table(result: dict[str, Any]) -> str:
    lines = [
        "| rows in the file | caller | store recall p50 / p95 ms | block_for p50 / p95 ms | bare FTS5 p50 / p95 ms |",  # noqa: E501 (a table row)
        "| --- | --- | --- | --- | --- |",
    ]
    for row in result["results"]:
        for m in row["callers"].values():
            cells = [
                f"{m[k]['p50']:.2f} / {m[k]['p95']:.2f}"
                for k in ("store_recall_ms", "block_for_ms", "bare_fts5_ms")
            ]
            lines.append(
                f"| {row['size']:,} | {m['exchanges']:,} exchanges | {' | '.join(cells)} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--recalls", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = asyncio.run(run(args))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))


if __name__ == "__main__":
    main()
