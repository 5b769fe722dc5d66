"""Cost benchmark: does one caller's recall (sqlite) cost what that caller has stored,
and not what the whole file holds?

Imports the template's own memory/ folder (its sqlite_store among it; copied unrendered into
generated projects). Generated SQLite files of 10k, 100k and 1M exchanges (cached in
/tmp, see --cache; never committed). Every file holds:

- **caller A** (100 exchanges, 9 call summaries, 5 facts) and **caller B** (10,000
  exchanges, 834 call summaries, 40 facts), loaded first, so the "10k" file is these
  two callers alone (10,100 rows) and both are measured at every size;
- other callers' rows (10,000 other callers) up to the size, a call summary per 12;
- **bare FTS5**: the store's first design, a plain FTS5 table over the raw text with a
  ``caller_key`` column (``caller_key:k AND (w1 OR w2 ...)``, ``ORDER BY bm25 LIMIT
  8``), filled with the same rows.

At each size, side by side in one process, for each caller, one pass each over the
same questions: ``store.recall`` as ``CallMemory.block_for`` calls it (the best
``memory.RECALL_EXCHANGES``, the current call left out), ``CallMemory.block_for``
itself (recall + ranking + formatting; a new turn each time, so nothing is cached)
and the bare FTS5 query. Each
is timed twice: wall clock (``time.perf_counter``) and CPU time of this process
(``time.process_time``: the store's read runs on its reader thread, and no other
thread of the process works meanwhile), which other processes' load inflates much less
than the wall clock. The load average is printed with the figures.

Each question names three content words of one of the caller's own exchanges, padded
with function words as a spoken question is. Text: scale.py's generator
(Zipf-distributed words over a 30k-word vocabulary). p50 / p95 (nearest rank) over
--recalls questions per caller and size, after 20 to warm up. "found": the share of
questions whose own exchange came back (store: among those recalled; bare FTS5: in its
top 8; block_for: its caller side in the block).

Usage:
    nice -n 10 uv run python benchmarks/cost.py [--sizes 10000,100000,1000000] [--out results.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import sqlite3
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "{{cookiecutter.project_slug}}"
sys.path[:0] = [str(TEMPLATE), str(ROOT / "benchmarks")]

import memory  # noqa: E402
from memory import (  # noqa: E402
    postgres_migrations,
    postgres_schema,
    postgres_search,
    sqlite_queries,
    sqlite_store,
)
from scale import FUNCTION_WORDS, Text, caller_of, percentile  # noqa: E402

CALLER_A = "caller-a@example.com"  # 100 exchanges
CALLER_B = "caller-b@example.com"  # 10,000 exchanges
OWN = {CALLER_A: 100, CALLER_B: 10_000}
FACTS = {CALLER_A: 5, CALLER_B: 40}
LAYOUT = 3  # of the generated files: a new number builds them afresh
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


def load(path: Path, batch: list[memory.Exchange], facts: int = 0) -> None:
    """Into the store's tables as a save writes them (sqlite_queries.save; the store's
    triggers keep its indexes) and into the bare FTS5 table, in one transaction.
    Every 12th exchange also gets a call summary (its two sides), and the first
    ``facts`` exchanges a fact each (kind "note", value its first 60 characters)."""
    conn = sqlite3.connect(path, isolation_level=None)
    sqlite_store.add_functions(conn)  # what the index's triggers compute words with
    conn.execute("BEGIN")
    conn.executemany(
        """INSERT OR IGNORE INTO summaries (caller_id, call_id, text, created_at)
           VALUES (?, ?, ?, ?)""",
        [
            (e.caller_id, e.call_id, f"{e.user_text}. {e.assistant_text}", e.created_at)
            for e in batch[::12]
        ],
    )
    conn.executemany(
        """INSERT INTO facts (caller_id, kind, value, learned_at, updated_at)
           VALUES (?, 'note', ?, ?, ?)""",
        [(e.caller_id, e.user_text[:60], e.created_at, e.created_at) for e in batch[:facts]],
    )
    for e in batch:  # the store's own write, so the index holds what a save puts there
        sqlite_queries.save(conn, e)
    conn.executemany(
        "INSERT INTO bare_fts (caller_key, user_text, assistant_text) VALUES (?, ?, ?)",
        [(sqlite_store.caller_key(e.caller_id), e.user_text, e.assistant_text) for e in batch],
    )
    conn.execute("COMMIT")
    conn.close()


def files(cache: Path, sizes: list[int], seed: int) -> dict[int, tuple[Path, float]]:
    """The generated file of each size, with the seconds its fill took: built once
    (callers A and B, then other callers' rows, each size grown from the one before)
    and kept in ``cache``, whose name holds the schema version,
    LAYOUT and the seed."""
    cache.mkdir(parents=True, exist_ok=True)
    made = {s: cache / f"{s}.db" for s in sizes}
    fill_s = json.loads((cache / "fill.json").read_text()) if (cache / "fill.json").exists() else {}
    if all(p.exists() for p in made.values()):
        return {s: (p, fill_s.get(str(s), 0.0)) for s, p in made.items()}
    rng = random.Random(seed)
    text = Text(rng)
    work = cache / "filling.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{work}{suffix}").unlink(missing_ok=True)
    sqlite_store.SQLiteStore.open(work)  # the schema, made by the store itself
    conn = sqlite3.connect(work)
    conn.execute(BARE_FTS)
    conn.close()
    started = time.perf_counter()
    n = 0
    for caller, count in OWN.items():
        for i in range(0, count, 5_000):
            load(
                work,
                [exchange(text, caller, n + j) for j in range(min(5_000, count - i))],
                facts=FACTS[caller] if i == 0 else 0,
            )
            n += min(5_000, count - i)
    for size in sorted(sizes):
        while n < size:
            step = min(50_000, size - n)
            load(
                work, [exchange(text, caller_of(rng.randrange(10_000)), n + i) for i in range(step)]
            )
            n += step
        conn = sqlite3.connect(work)
        conn.execute("ANALYZE")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        fill_s[str(size)] = round(time.perf_counter() - started, 1)
        print(f"filled {n:,} rows in {fill_s[str(size)]} s", file=sys.stderr)
        shutil.copyfile(work, made[size])
        (cache / "fill.json").write_text(json.dumps(fill_s))
    for suffix in ("", "-wal", "-shm"):
        Path(f"{work}{suffix}").unlink(missing_ok=True)
    return {s: (p, fill_s[str(s)]) for s, p in made.items()}


def question(user_text: str, rng: random.Random) -> str:
    words = [w for w in user_text.split() if w not in FUNCTION_WORDS]
    return "do you remember what i said about " + " and ".join(
        rng.sample(words, min(3, len(words)))
    )


def bare_query(conn: sqlite3.Connection, caller: str, q: str) -> list[int]:
    words = memory.words.query_words(q)
    if not words:
        return []
    match = " OR ".join(f'"{w}"' for w in words)
    rows = conn.execute(
        """SELECT rowid FROM bare_fts WHERE bare_fts MATCH ?
           ORDER BY bm25(bare_fts, 0.0, 1.0, 1.0) LIMIT 8""",
        (f"caller_key:{sqlite_store.caller_key(caller)} AND ({match})",),
    )
    return [r[0] for r in rows]


def stats(wall: list[float], cpu: list[float]) -> dict[str, float]:
    return {
        "p50": percentile(wall, 50) * 1000,
        "p95": percentile(wall, 95) * 1000,
        "cpu_p50": percentile(cpu, 50) * 1000,
        "cpu_p95": percentile(cpu, 95) * 1000,
    }


async def measure(path: Path, rng: random.Random, recalls: int) -> dict[str, Any]:
    store = sqlite_store.SQLiteStore.open(path)
    bare = sqlite3.connect(path)
    out: dict[str, Any] = {}
    try:
        for caller in OWN:
            # (rowid, key, user_text): the bare table's rowids are the store's (same loads)
            rows = bare.execute(
                "SELECT rowid, key, user_text FROM exchanges WHERE caller_id = ?", (caller,)
            ).fetchall()
            targets = [rng.choice(rows) for _ in range(recalls + 20)]
            asked = [question(t[2], rng) for t in targets]
            call = memory.CallMemory(store, caller, "now")
            call.profile = await store.profile(caller)

            async def bare_fts(q: str, caller: str = caller) -> Any:
                return bare_query(bare, caller, q)

            async def recall(q: str, caller: str = caller) -> Any:
                return await store.recall(caller, q, exclude_call_id="now")

            turn = 0

            async def block(q: str, call: memory.CallMemory = call) -> Any:
                nonlocal turn
                turn += 1
                return await call.block_for(q, turn=turn)

            # the exchange the question was made from, among what came back?
            found = {
                "store_recall": lambda r, t: t[1] in {e.key for e in r.exchanges},
                "block_for": lambda r, t: json.dumps(t[2])[1:-1] in (r or ""),
                "bare_fts5": lambda r, t: t[0] in r,
            }
            kinds: dict[str, Callable[[str], Awaitable[Any]]] = {
                "store_recall": recall,
                "block_for": block,
                "bare_fts5": bare_fts,
            }
            times: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in kinds}
            hits = dict.fromkeys(kinds, 0)
            # One pass per kind over the same questions, not each question three
            # times in turn: at 1M rows a bare FTS5 query reads ~10 ms of index pages,
            # and run just before the store's recall it doubled that recall's CPU time
            # (the store's own pages pushed out of the CPU's caches).
            for name, fn in kinds.items():
                for i, (q, target) in enumerate(zip(asked, targets, strict=True)):
                    t, c = time.perf_counter(), time.process_time()
                    result = await fn(q)
                    if i >= 20:  # the first 20 warm up connections and page cache
                        times[name][1].append(time.process_time() - c)
                        times[name][0].append(time.perf_counter() - t)
                        hits[name] += found[name](result, target)
            out[caller] = {"exchanges": len(rows)} | {
                f"{name}_ms": stats(*times[name]) | {"found": hits[name] / recalls}
                for name in kinds
            }
    finally:
        bare.close()
        await store.close()
    return out


def generated(size: int, seed: int) -> Any:
    """The rows of ``files``' file of ``size``, in the batches it loads them in (so
    the same rows get a call summary), from the same seed."""
    rng = random.Random(seed)
    text = Text(rng)
    n = 0
    for caller, count in OWN.items():
        for i in range(0, count, 5_000):
            yield [exchange(text, caller, n + j) for j in range(min(5_000, count - i))]
            n += min(5_000, count - i)
    while n < size:
        step = min(50_000, size - n)
        yield [exchange(text, caller_of(rng.randrange(10_000)), n + i) for i in range(step)]
        n += step


def postgres_schemas(url: str, sizes: list[int], seed: int) -> dict[int, tuple[str, float]]:
    """A schema of each size on the server ``url`` names, holding ``files``' rows
    (facts and summaries alike), built once and kept: named after the schema version,
    LAYOUT, the seed and the size; with the seconds its fill took. Loaded as the
    bulk load of an operator would: the exchanges with their word columns as a save
    writes them (``postgres_search.exchange_words``) by COPY, their turns then made by
    the store's own SQL (``postgres_migrations.TURN_ROWS``) in one statement, and the GIN
    index built after."""
    made: dict[int, tuple[str, float]] = {}
    for size in sizes:
        schema = f"cost_v{postgres_schema.SCHEMA_VERSION}_l{LAYOUT}_s{seed}_{size}"
        target = postgres_schema.Target(f"{url}?schema={schema}")
        with target.connect(autocommit=True) as conn:
            done = conn.execute(
                "SELECT obj_description(to_regnamespace(%s), 'pg_namespace')", [schema]
            ).fetchone()[0]
        if done:
            made[size] = (schema, float(done))
            continue
        with target.connect(autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        postgres_schema.upgrade(f"{url}?schema={schema}")
        started = time.perf_counter()
        with target.connect(autocommit=True) as conn:
            s = schema
            conn.execute(f"ALTER TABLE {s}.exchanges DISABLE TRIGGER index_inserted")
            conn.execute(f"DROP INDEX {s}.turns_search")
            for batch in generated(size, seed):
                with (
                    conn.transaction(),
                    conn.cursor().copy(
                        f"COPY {s}.exchanges (tenant, caller_id, key, call_id, user_text,"
                        " assistant_text, interrupted, item_ids, created_at, user_words,"
                        " reply_words, day_words) FROM STDIN"
                    ) as copy,
                ):
                    for e in batch:
                        w = postgres_search.exchange_words("default", e)
                        copy.write_row(
                            (
                                "default",
                                e.caller_id,
                                e.key,
                                e.call_id,
                                e.user_text,
                                e.assistant_text,
                                False,
                                list(e.item_ids),
                                e.created_at,
                                w["uw"],
                                w["rw"],
                                w["dw"],
                            )
                        )
                with conn.transaction():
                    conn.cursor().executemany(
                        f"INSERT INTO {s}.summaries VALUES ('default', %s, %s, %s, %s)"
                        " ON CONFLICT DO NOTHING",
                        [
                            (
                                e.caller_id,
                                e.call_id,
                                f"{e.user_text}. {e.assistant_text}",
                                e.created_at,
                            )
                            for e in batch[::12]
                        ],
                    )
                print(f"{schema}: loaded {len(batch):,} rows", file=sys.stderr)
            for caller, facts in FACTS.items():
                conn.execute(
                    f"INSERT INTO {s}.facts (tenant, caller_id, kind, value, updated_at,"
                    " learned_at) SELECT 'default', caller_id, 'note', left(user_text, 60),"
                    f" created_at, created_at FROM {s}.exchanges WHERE caller_id = %s"
                    " ORDER BY created_at LIMIT %s",
                    [caller, facts],
                )
            conn.execute("SET maintenance_work_mem = '512MB'")
            conn.execute("SET work_mem = '256MB'")
            turns = postgres_migrations.TURN_ROWS.format(s=s, rows=f"{s}.exchanges")
            conn.execute(f"INSERT INTO {s}.turns {turns}")
            conn.execute(
                f"CREATE INDEX turns_search ON {s}.turns USING gin (words) WITH (fastupdate = off)"
            )
            conn.execute(f"ALTER TABLE {s}.exchanges ENABLE TRIGGER index_inserted")
            conn.execute(f"VACUUM ANALYZE {s}.exchanges")
            conn.execute(f"VACUUM ANALYZE {s}.turns")
            conn.execute(f"VACUUM ANALYZE {s}.caller_words")
            fill = round(time.perf_counter() - started, 1)
            conn.execute(f"COMMENT ON SCHEMA {s} IS '{fill}'")  # built: its fill time
        print(f"{schema}: filled in {fill} s", file=sys.stderr)
        made[size] = (schema, fill)
    return made


def server_cpu(target: Any) -> float:
    """Seconds of CPU the server's backends of the store's pool have used (from
    /proc: the server runs on this machine), found as the backends whose last query
    named the schema; the clock ticks are 10 ms, so only a mean over many recalls
    means anything."""
    with target.connect(autocommit=True) as conn:
        pids = [
            r[0]
            for r in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
                " AND position(%s IN query) > 0",
                [target.schema + "."],
            )
        ]
    ticks = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


async def measure_postgres(url: str, rng: random.Random, recalls: int) -> dict[str, Any]:
    """As ``measure``, on the postgres store (no bare FTS5 there)."""
    store = memory.open_store(url)
    target = postgres_schema.Target(url)
    out: dict[str, Any] = {}
    try:
        for caller in OWN:
            with target.connect() as conn:
                rows = conn.execute(
                    f"SELECT 0, key, user_text FROM {target.schema}.exchanges"
                    " WHERE tenant = 'default' AND caller_id = %s ORDER BY created_at",
                    [caller],
                ).fetchall()
            targets = [rng.choice(rows) for _ in range(recalls + 20)]
            asked = [question(t[2], rng) for t in targets]
            call = memory.CallMemory(store, caller, "now")
            call.profile = await store.profile(caller)

            async def recall(q: str, caller: str = caller) -> Any:
                return await store.recall(caller, q, exclude_call_id="now")

            turn = 0

            async def block(q: str, call: memory.CallMemory = call) -> Any:
                nonlocal turn
                turn += 1
                return await call.block_for(q, turn=turn)

            found = {
                "store_recall": lambda r, t: t[1] in {e.key for e in r.exchanges},
                "block_for": lambda r, t: json.dumps(t[2])[1:-1] in (r or ""),
            }
            kinds: dict[str, Callable[[str], Awaitable[Any]]] = {
                "store_recall": recall,
                "block_for": block,
            }
            times: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in kinds}
            hits = dict.fromkeys(kinds, 0)
            server: dict[str, float] = {}
            for name, fn in kinds.items():
                for i, (q, target_row) in enumerate(zip(asked, targets, strict=True)):
                    if i == 20:
                        before = server_cpu(target)
                    t, c = time.perf_counter(), time.process_time()
                    result = await fn(q)
                    if i >= 20:
                        times[name][1].append(time.process_time() - c)
                        times[name][0].append(time.perf_counter() - t)
                        hits[name] += found[name](result, target_row)
                server[name] = (server_cpu(target) - before) / recalls * 1000
            out[caller] = {"exchanges": len(rows)} | {
                f"{name}_ms": stats(*times[name])
                | {"found": hits[name] / recalls, "server_cpu_mean": server[name]}
                for name in kinds
            }
    finally:
        await store.close()
    return out


async def run_postgres(args: argparse.Namespace) -> dict[str, Any]:
    sizes = sorted(int(s) for s in args.sizes.split(","))
    made = postgres_schemas(args.postgres, sizes, args.seed)
    rng = random.Random(args.seed + 1)
    results: list[dict[str, Any]] = []
    for size in sizes:
        schema, fill_s = made[size]
        url = f"{args.postgres}?schema={schema}"
        load_before = os.getloadavg()
        callers = await measure_postgres(url, rng, args.recalls)
        target = postgres_schema.Target(url)
        with target.connect() as conn:
            count, mib = conn.execute(
                f"SELECT (SELECT count(*) FROM {schema}.exchanges),"
                " (SELECT sum(pg_total_relation_size(c.oid)) / 2^20 FROM pg_class c"
                " WHERE relnamespace = to_regnamespace(%s))",
                [schema],
            ).fetchone()
        row = {
            "size": count,
            "schema": schema,
            "fill_s": fill_s,
            "file_mib": round(mib),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
            "callers": callers,
        }
        results.append(row)
        print(json.dumps(row), file=sys.stderr)
    return {
        "benchmark": "cost (postgres)",
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "recalls": args.recalls,
        "results": results,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = sorted(int(s) for s in args.sizes.split(","))
    cache = args.cache / f"schema{sqlite_store.SCHEMA_VERSION}-layout{LAYOUT}-seed{args.seed}"
    made = files(cache, sizes, args.seed)
    rng = random.Random(args.seed + 1)
    results: list[dict[str, Any]] = []
    for size in sizes:
        path, fill_s = made[size]
        load_before = os.getloadavg()
        callers = await measure(path, rng, args.recalls)
        row = {
            "size": sqlite3.connect(path).execute("SELECT count(*) FROM exchanges").fetchone()[0],
            "fill_s": fill_s,
            "file_mib": round(path.stat().st_size / 2**20),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
            "callers": callers,
        }
        results.append(row)
        print(json.dumps(row), file=sys.stderr)
    return {
        "benchmark": "cost",
        "machine": {
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "recalls": args.recalls,
        "results": results,
    }


def postgres_table(result: dict[str, Any]) -> str:
    kinds = ("store_recall_ms", "block_for_ms")
    lines = [
        "| rows in the schema | caller | store recall p50 / p95 ms | block_for p50 / p95"
        " ms | CPU ms p50 / p95 (this process): recall, block_for | server CPU ms per"
        " call, mean: recall, block_for | found: store | size | load |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in result["results"]:
        load = "{:.1f} / {:.1f}".format(row["loadavg_before"][0], row["loadavg_after"][0])
        for caller, m in row["callers"].items():
            wall = [f"{m[k]['p50']:.2f} / {m[k]['p95']:.2f}" for k in kinds]
            cpu = ", ".join(f"{m[k]['cpu_p50']:.2f} / {m[k]['cpu_p95']:.2f}" for k in kinds)
            lines.append(
                f"| {row['size']:,} | {'A' if caller == CALLER_A else 'B'}, "
                f"{m['exchanges']:,} exchanges | {' | '.join(wall)} | {cpu} | "
                + ", ".join(f"{m[k].get('server_cpu_mean', 0):.2f}" for k in kinds)
                + f" | {m['store_recall_ms']['found']:.2f} | {row['file_mib']:,} MiB | {load} |"
            )
    return "\n".join(lines)


def table(result: dict[str, Any]) -> str:
    kinds = ("store_recall_ms", "block_for_ms", "bare_fts5_ms")
    lines = [
        "| rows in the file | caller | store recall p50 / p95 ms | block_for p50 / p95 ms "
        "| bare FTS5 p50 / p95 ms | CPU ms p50 / p95: recall, block_for, bare FTS5 "
        "| found: store, bare | load |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in result["results"]:
        load = "{:.1f} / {:.1f}".format(row["loadavg_before"][0], row["loadavg_after"][0])
        for caller, m in row["callers"].items():
            wall = [f"{m[k]['p50']:.2f} / {m[k]['p95']:.2f}" for k in kinds]
            cpu = ", ".join(f"{m[k]['cpu_p50']:.2f} / {m[k]['cpu_p95']:.2f}" for k in kinds)
            lines.append(
                f"| {row['size']:,} | {'A' if caller == CALLER_A else 'B'}, "
                f"{m['exchanges']:,} exchanges | {' | '.join(wall)} "
                f"| {cpu} | {m['store_recall_ms']['found']:.2f}, {m['bare_fts5_ms']['found']:.2f} "
                f"| {load} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--recalls", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path("/tmp/memory-cost"),
        help="where the generated files are kept between runs (one folder per schema version)",
    )
    parser.add_argument(
        "--postgres",
        metavar="URL",
        help="measure the postgres store instead, on this server (a libpq URL without"
        " parameters); its schemas are built once and kept"
        " (cost_v<schema>_l<layout>_s<seed>_<size>)",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = asyncio.run(run_postgres(args) if args.postgres else run(args))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(postgres_table(result) if args.postgres else table(result))


if __name__ == "__main__":
    main()
