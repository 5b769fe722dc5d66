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
- forget: a caller with --big-caller exchanges (saved in bulk by ``scale.load_sqlite``,
  the store's own write, in 833 calls of 12) among 10,000 other exchanges;
  ``store.forget(caller)`` until it answers (the delete, not the erasure after it).

Usage:
    uv run python benchmarks/writes.py [--exchanges 4000] [--out results.json]
"""

from __future__ import annotations

import argparse
import asyncio
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

# scale.py puts the template's files on the path and imports them
from scale import Text, load_sqlite, memory, rows  # noqa: E402

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


async def one_process(db: Path, queue: list[memory.Exchange]) -> float:
    store = memory.open_store(f"sqlite:///{db}")
    await store.save(queue[0])  # the file created and migrated before the clock starts
    started = time.perf_counter()
    await save_all(store, queue[1:])
    took = time.perf_counter() - started
    await store.close()
    return (len(queue) - 1) / took


def _worker(db: str, seed: int, count: int, tag: str, ready, go, done) -> None:  # type: ignore[no-untyped-def]
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
        context.Process(
            target=_worker, args=(str(db), seed + n, share, f"p{n}", ready, go, done)
        )
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


async def big_forget(db: Path, seed: int, size: int) -> float:
    rng = random.Random(seed)
    text = Text(rng)
    store = memory.open_store(f"sqlite:///{db}")
    big = [
        memory.Exchange(**{**e.__dict__, "caller_id": BIG, "call_id": f"big-{n // 12}"})
        for n, e in enumerate(rows(text, rng, 0, size))
    ]
    load_sqlite(db, big)
    load_sqlite(db, rows(text, rng, size, size + 10_000))
    started = time.perf_counter()
    await store.forget(BIG)
    took = time.perf_counter() - started
    await store.close()
    return took


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
            "one_process_saves_per_s": round(asyncio.run(one_process(one, queue))),
        }
        result["bytes_per_exchange"] = bytes_per_exchange(one)
        result["four_processes"] = four_processes(
            Path(folder) / "four.db", args.seed, args.exchanges
        )
        forget = asyncio.run(big_forget(Path(folder) / "big.db", args.seed, args.big_caller))
        result["big_caller_forget_s"] = round(forget, 2)
        result["load_after"] = os.getloadavg()[0]
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
