"""Write-cost benchmark (sqlite): saves per second in one process and in four, bytes
per stored exchange (and which table holds them), and how long a big caller's forget
takes to answer.

Imports the template's own memory/ folder. Text: scale.py's generator (Zipf-distributed
words, a caller turn of 6-30 words, a reply of 4-25), deterministic (--seed). Each
figure starts from a new temporary file.

- one process: --exchanges saves through ``store.save`` from 8 calls at once (each its
  own caller, ``scale.measure``'s shape), timed from the first to the last;
- four processes: the same number of saves, a quarter from each of four processes
  (``multiprocessing``, each its own store on the one file, 8 calls each), timed from
  when all four are ready to when the last is done; then the file is counted: every key
  must be there once (lost / doubled);
- bytes: the file's size after a TRUNCATE checkpoint, divided by the exchanges it holds
  (the one-process file), and each table's and index's share (SQLite's ``dbstat``);
- what each part of the turn index costs: the one-process file's index built again in
  one statement (so every variant is as compact), whole and then without each part
  (the neighbours' words as context, the day's words), and the bytes of its tables;
- forget: a caller with --big-caller exchanges (saved in bulk by ``scale.load_sqlite``,
  the store's own write, in 833 calls of 12) among 10,000 other exchanges;
  ``store.forget(caller)`` until it answers (the delete, not the erasure after it).

Usage:
    uv run python benchmarks/writes.py [--exchanges 4000] [--out results.json]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import multiprocessing
import os
import platform
import random
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parent))

# scale.py puts the template's files on the path and imports them
from scale import Text, load_sqlite, memory, rows

sqlite_schema = importlib.import_module("memory.sqlite_schema")
sqlite_store = importlib.import_module("memory.sqlite_store")
try:
    sqlite_index: ModuleType | None = importlib.import_module("memory.sqlite_index")
except ImportError:  # the code before schema 8
    sqlite_index = None

CALLS = 8
BIG = "big-caller@example.com"


def exchanges(seed: int, count: int, tag: str) -> list[memory.Exchange]:
    rng = random.Random(seed)
    text = Text(rng)
    return [
        memory.Exchange(
            key=uuid.UUID(int=rng.getrandbits(128)).hex,
            caller_id=f"{tag}-caller-{n % CALLS}@example.com",
            call_id=f"{tag}-call-{n % CALLS}-{n // (CALLS * 12)}",
            user_text=text.sentence(6, 30),
            assistant_text=text.sentence(4, 25),
            item_ids=(f"{tag}-{n}", f"{tag}-{n}-a"),
            created_at=1.7e9 + n,
        )
        for n in range(count)
    ]


async def save_all(store: memory.MemoryStore, queue: list[memory.Exchange]) -> None:
    async def call(lane: int) -> None:
        for e in queue[lane::CALLS]:
            await store.save(e)

    await asyncio.gather(*(call(lane) for lane in range(CALLS)))


async def one_process(db: Path, queue: list[memory.Exchange]) -> tuple[float, float]:
    """Saves per second of wall-clock time, and per second of this process's CPU time
    (every thread's: the saves run on the store's writer thread), which the load of
    other processes on the machine inflates much less."""
    store = memory.open_store(f"sqlite:///{db}")
    await store.save(queue[0])  # the file created and migrated before the clock starts
    started, cpu = time.perf_counter(), time.process_time()
    await save_all(store, queue[1:])
    took, cpu = time.perf_counter() - started, time.process_time() - cpu
    await store.close()
    return (len(queue) - 1) / took, (len(queue) - 1) / cpu


def _worker(db: str, seed: int, count: int, tag: str, ready, go, done) -> None:
    async def main() -> None:
        store = memory.open_store(f"sqlite:///{db}")
        await store.stats()  # connection open before the clock starts
        queue = exchanges(seed, count, tag)
        ready.release()
        await asyncio.get_running_loop().run_in_executor(None, go.wait)
        await save_all(store, queue)
        await store.close()
        done.put(count)

    asyncio.run(main())


def four_processes(db: Path, seed: int, count: int) -> dict[str, float | int]:
    memory.open_store(f"sqlite:///{db}")  # created and migrated once, up front
    context = multiprocessing.get_context("spawn")
    ready, go, done = context.Semaphore(0), context.Event(), context.Queue()
    share = count // 4
    workers = [
        context.Process(target=_worker, args=(str(db), seed + n, share, f"p{n}", ready, go, done))
        for n in range(4)
    ]
    for w in workers:
        w.start()
    for _ in workers:
        ready.acquire()
    started = time.perf_counter()
    go.set()
    for _ in workers:
        done.get()
    took = time.perf_counter() - started
    for w in workers:
        w.join()
    keys = {e.key for n in range(4) for e in exchanges(seed + n, share, f"p{n}")}
    conn = sqlite3.connect(db)
    stored = conn.execute("SELECT key FROM exchanges").fetchall()
    conn.close()
    found = [k for (k,) in stored]
    return {
        "saves_per_s": round(4 * share / took),
        "lost": len(keys - set(found)),
        "doubled": len(found) - len(set(found)),
    }


def bytes_per_exchange(db: Path) -> dict[str, float]:
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    n = conn.execute("SELECT count(*) FROM exchanges").fetchone()[0]
    shares = {
        name: round(size / n)
        for name, size in conn.execute(
            "SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC"
        )
        if size / n >= 1
    }
    conn.close()
    return {"file": round(db.stat().st_size / n), **shares}


def index_parts(db: Path, folder: Path) -> dict[str, int]:
    """Bytes per exchange of the turn index (turns_fts_*), built afresh in one
    statement with all its parts and without each one."""
    assert sqlite_index is not None
    out = {}
    for name, context, day in (
        ("whole", True, True),
        ("without context", False, True),
        ("without day", True, False),
        ("without both", False, False),
    ):
        copy = folder / f"parts-{name.replace(' ', '-')}.db"
        source, target = sqlite3.connect(db), sqlite3.connect(copy, isolation_level=None)
        source.backup(target)
        source.close()
        sqlite_store.add_functions(target)
        target.execute("DROP TABLE turns_fts")
        target.execute(
            "CREATE VIRTUAL TABLE turns_fts USING fts5 (words, context, day, content='',"
            f' tokenize="{sqlite_schema._FTS_TOKENIZER}")'
        )
        for sql in sqlite_index._turn_rows(
            "x", sqlite_index._context_of("x") if context else "''", "FROM exchanges x"
        ):
            target.execute(sql if day else sql.replace("x.day)", "'')"))
        target.execute("VACUUM")
        n = target.execute("SELECT count(*) FROM exchanges").fetchone()[0]
        size = target.execute(
            "SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'turns_fts%'"
        ).fetchone()[0]
        target.close()
        out[name] = round(size / n)
    return out


async def big_forget(db: Path, seed: int, size: int) -> tuple[float, float]:
    rng = random.Random(seed)
    text = Text(rng)
    store = memory.open_store(f"sqlite:///{db}")
    big = [
        memory.Exchange(**{**e.__dict__, "caller_id": BIG, "call_id": f"big-{n // 12}"})
        for n, e in enumerate(rows(text, rng, 0, size))
    ]
    load_sqlite(db, big)
    load_sqlite(db, rows(text, rng, size, size + 10_000))
    started, cpu = time.perf_counter(), time.process_time()
    await store.forget(BIG)
    took, cpu = time.perf_counter() - started, time.process_time() - cpu
    await store.close()
    return took, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exchanges", type=int, default=4000)
    parser.add_argument("--big-caller", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        one = Path(folder) / "one.db"
        queue = exchanges(args.seed, args.exchanges + 1, "one")
        result: dict = {
            "sqlite": sqlite3.sqlite_version,
            "machine": platform.platform(),
            "load_before": os.getloadavg()[0],
        }
        wall, cpu = asyncio.run(one_process(one, queue))
        result["one_process_saves_per_s"] = round(wall)
        result["one_process_saves_per_cpu_s"] = round(cpu)
        result["bytes_per_exchange"] = bytes_per_exchange(one)
        if sqlite_index is not None:  # schema 8 on
            result["index_parts"] = index_parts(one, Path(folder))
        result["four_processes"] = four_processes(
            Path(folder) / "four.db", args.seed, args.exchanges
        )
        forget, cpu = asyncio.run(big_forget(Path(folder) / "big.db", args.seed, args.big_caller))
        result["big_caller_forget_s"] = round(forget, 2)
        result["big_caller_forget_cpu_s"] = round(cpu, 2)
        result["load_after"] = os.getloadavg()[0]
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
