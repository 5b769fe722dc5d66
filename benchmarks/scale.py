"""Scale benchmark: recall latency and write throughput of the sqlite and postgres
backends side by side, as the store grows to 1k, 100k and 1M exchanges of 10k callers.

Imports the template's own files (the memory/ folder; Python files are
copied unrendered into generated projects, so these are the files a project runs).
The data is generated, deterministic (--seed) and thrown away: a temporary SQLite
file, and a schema of its own on the PostgreSQL server --postgres names (dropped at
the end).

What is measured at each size, for each backend, in one process:
- recall: ``store.recall(caller, question)`` as ``CallMemory.block_for`` calls it
  (limit 8, the current call left out), one at a time, for --recalls random callers
  (or as many as fit in --recall-seconds)
  that have exchanges; the question shares a few content words with one of the
  caller's exchanges and is padded with function words, as a spoken question is.
  p50 / p95 / p99 in milliseconds.
- writes: --writes new exchanges saved with ``store.save`` from --concurrency calls
  at once (each its own caller); exchanges per second, and p50 / p95 of one save.

Filling: the rows up to each size are loaded in bulk through each backend's own
tables (SQLite: INSERT in one transaction, its triggers keep the FTS index; PostgreSQL:
COPY, the generated tsvector column and the GIN index kept as usual), then ANALYZE.
Text: words drawn from a Zipf distribution over a 30k-word generated vocabulary,
mixed with English function words; a caller turn has 6-30 words, a reply 4-25.

Usage:
    uv run python benchmarks/scale.py [--sizes 1000,100000,1000000] [--out results.json]
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "{{cookiecutter.project_slug}}"
sys.path[:0] = [
    str(TEMPLATE),
]

import memory  # noqa: E402
import psycopg  # noqa: E402
from memory import postgres_search, postgres_store, sqlite_queries, sqlite_store  # noqa: E402

CALLERS = 10_000
FUNCTION_WORDS = ["i", "you", "the", "a", "to", "and", "of", "it", "that", "in", "is", "was"]


class Text:
    """Deterministic conversational-looking text: Zipf-distributed content words."""

    def __init__(self, rng: random.Random, vocabulary: int = 30_000) -> None:
        self.rng = rng
        syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"] + ["an", "er", "os", "il"]
        words: set[str] = set()
        while len(words) < vocabulary:
            words.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))))
        self.words = sorted(words)
        rng.shuffle(self.words)
        weights = [1 / (rank + 1) ** 1.07 for rank in range(vocabulary)]
        total = sum(weights)
        self.cumulative = []
        acc = 0.0
        for w in weights:
            acc += w / total
            self.cumulative.append(acc)

    def word(self) -> str:
        return self.words[
            min(bisect.bisect(self.cumulative, self.rng.random()), len(self.words) - 1)
        ]

    def sentence(self, low: int, high: int) -> str:
        n = self.rng.randint(low, high)
        return " ".join(
            self.rng.choice(FUNCTION_WORDS) if self.rng.random() < 0.45 else self.word()
            for _ in range(n)
        )


def caller_of(n: int) -> str:
    return f"caller-{n:05d}@example.com"


def rows(text: Text, rng: random.Random, start: int, stop: int) -> list[memory.Exchange]:
    out = []
    for n in range(start, stop):
        caller = caller_of(rng.randrange(CALLERS))
        out.append(
            memory.Exchange(
                key=memory.exchange_key(caller, f"bulk-{n}"),
                caller_id=caller,
                call_id=f"call-{n // 12}",
                user_text=text.sentence(6, 30),
                assistant_text=text.sentence(4, 25),
                item_ids=(f"bulk-{n}", f"bulk-{n}-a"),
                created_at=1.7e9 + n,
            )
        )
    return out


def load_sqlite(path: Any, batch: list[memory.Exchange]) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    sqlite_store.add_functions(conn)  # what the index's triggers compute words with
    conn.execute("BEGIN")
    for e in batch:  # the store's own write, so the index holds what a save puts there
        sqlite_queries.save(conn, e)
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    conn.close()


def load_postgres(url: Any, batch: list[memory.Exchange]) -> None:
    target = postgres_store.Target(url)
    with target.connect() as conn:
        with conn.cursor().copy(
            f"COPY {target.schema}.exchanges (tenant, caller_id, key, call_id, user_text,"
            " assistant_text, interrupted, item_ids, created_at, user_words, reply_words,"
            " day_words) FROM STDIN"
        ) as copy:  # with the word columns a save writes (the triggers make the turns)
            for e in batch:
                words = postgres_search.exchange_words(target.tenant, e)
                copy.write_row(
                    (
                        target.tenant,
                        e.caller_id,
                        e.key,
                        e.call_id,
                        e.user_text,
                        e.assistant_text,
                        False,
                        list(e.item_ids),
                        e.created_at,
                        words["uw"],
                        words["rw"],
                        words["dw"],
                    )
                )
        conn.commit()
        conn.autocommit = True
        conn.execute(f"ANALYZE {target.schema}.exchanges")
        conn.execute(f"ANALYZE {target.schema}.turns")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


async def measure(
    store: memory.MemoryStore,
    stored: list[memory.Exchange],
    text: Text,
    rng: random.Random,
    recalls: int,
    writes: int,
    concurrency: int,
    serial: int,
    recall_seconds: float,
) -> dict:
    by_caller: dict[str, list[memory.Exchange]] = {}
    for e in stored:
        by_caller.setdefault(e.caller_id, []).append(e)
    callers = sorted(by_caller)
    for _ in range(20):  # warm up: connections, caches, prepared statements
        await store.recall(rng.choice(callers), "warm up")
    waits: list[float] = []
    found = 0
    stop_at = time.monotonic() + recall_seconds
    while len(waits) < recalls and time.monotonic() < stop_at:
        caller = rng.choice(callers)
        target = rng.choice(by_caller[caller])
        words = [w for w in target.user_text.split() if w not in FUNCTION_WORDS]
        picked = rng.sample(words, min(3, len(words)))
        question = "do you remember what i said about " + " and ".join(picked)
        started = time.perf_counter()
        recall = await store.recall(caller, question, exclude_call_id="the-current-call")
        waits.append(time.perf_counter() - started)
        found += any(e.key == target.key for e in recall.exchanges)
    recalls = len(waits)

    queue = [
        memory.Exchange(
            key=uuid.uuid4().hex,
            caller_id=caller_of(CALLERS + n % concurrency),
            call_id=f"bench-{n % concurrency}",
            user_text=text.sentence(6, 30),
            assistant_text=text.sentence(4, 25),
            item_ids=(f"w{n}",),
            created_at=time.time(),
        )
        for n in range(writes)
    ]
    save_times: list[float] = []

    async def saver(lane: int) -> None:
        for e in queue[lane::concurrency]:
            started = time.perf_counter()
            await store.save(e)
            save_times.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(saver(lane) for lane in range(concurrency)))
    elapsed = time.perf_counter() - started
    one_at_a_time = []
    for e in queue[:serial]:
        e2 = memory.Exchange(**{**e.__dict__, "key": uuid.uuid4().hex})
        t = time.perf_counter()
        await store.save(e2)
        one_at_a_time.append(time.perf_counter() - t)
    ms = 1000
    return {
        "recall_ms": {
            "p50": percentile(waits, 50) * ms,
            "p95": percentile(waits, 95) * ms,
            "p99": percentile(waits, 99) * ms,
            "mean": statistics.fmean(waits) * ms,
        },
        "recalls": recalls,
        "recall_found_target": found / recalls,
        "writes_per_s": writes / elapsed,
        "save_ms_concurrent": {
            "p50": percentile(save_times, 50) * ms,
            "p95": percentile(save_times, 95) * ms,
        },
        "save_ms_alone": {
            "p50": percentile(one_at_a_time, 50) * ms,
            "p95": percentile(one_at_a_time, 95) * ms,
        },
    }


def size_of(url_or_path: str | Path) -> int:
    if isinstance(url_or_path, Path):
        return sum(p.stat().st_size for p in url_or_path.parent.glob(url_or_path.name + "*"))
    target = postgres_store.Target(url_or_path)
    with target.connect() as conn:
        row = conn.execute(
            "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c"
            " WHERE relnamespace = to_regnamespace(%s) AND relkind = 'r'",
            [target.schema],
        ).fetchone()
        return row[0] if row else 0


async def run(args: argparse.Namespace) -> dict:
    rng = random.Random(args.seed)
    text = Text(rng)
    schema = f"bench_scale_{uuid.uuid4().hex[:8]}"
    pg_url = args.postgres + ("&" if "?" in args.postgres else "?") + f"schema={schema}"
    postgres_store.upgrade(pg_url)
    tmp = tempfile.TemporaryDirectory()
    db = Path(tmp.name) / "memory.db"
    stores = {"sqlite": memory.open_store(f"sqlite:///{db}"), "postgres": memory.open_store(pg_url)}
    results: dict = {
        "sizes": {},
        "machine": {
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "postgres": psycopg.connect(args.postgres).info.server_version,
            "psycopg": psycopg.__version__,
            "cpus": __import__("os").cpu_count(),
        },
        "args": {k: v for k, v in vars(args).items() if k != "out"},
    }
    stored: list[memory.Exchange] = []
    try:
        for size in args.sizes:
            batch = rows(text, rng, len(stored), size)
            stored.extend(batch)
            for name, load in (("sqlite", load_sqlite), ("postgres", load_postgres)):
                started = time.perf_counter()
                load(db if name == "sqlite" else pg_url, batch)
                took = time.perf_counter() - started
                print(f"{size:>9,} {name:8} loaded {len(batch):,} in {took:.1f} s", flush=True)
            results["sizes"][size] = {}
            for name, store in stores.items():
                r = await measure(
                    store,
                    stored,
                    text,
                    random.Random(args.seed + size),
                    args.recalls,
                    args.writes,
                    args.concurrency,
                    args.serial,
                    args.recall_seconds,
                )
                r["bytes"] = size_of(db if name == "sqlite" else pg_url)
                results["sizes"][size][name] = r
                print(
                    f"{size:>9,} {name:8} recall p50 {r['recall_ms']['p50']:.2f} ms"
                    f" p95 {r['recall_ms']['p95']:.2f} ms ({r['recalls']} recalls)"
                    f" | {r['writes_per_s']:.0f} writes/s"
                    f" | {r['bytes'] / 2**20:.0f} MiB",
                    flush=True,
                )
    finally:
        for store in stores.values():
            await store.close()
        with psycopg.connect(args.postgres, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        tmp.cleanup()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", default="1000,100000,1000000", type=lambda s: [int(x) for x in s.split(",")]
    )
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--recalls", type=int, default=1000)
    parser.add_argument(
        "--recall-seconds",
        type=float,
        default=90,
        help="stop measuring recalls after this long (slow sizes get fewer)",
    )
    parser.add_argument("--writes", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8, help="calls saving at once")
    parser.add_argument("--serial", type=int, default=200, help="saves timed one at a time")
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    # the postgres store's spool: a folder of its own, not the template's data/
    os.environ.setdefault("MEMORY_DATA_DIR", tempfile.mkdtemp(prefix="scale-spool-"))
    results = asyncio.run(run(args))
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
