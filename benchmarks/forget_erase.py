"""Forget-erase benchmark (sqlite): what erasing a forgotten caller's bytes costs as
the store grows.

Imports the template's own memory/ folder. At each size, a temporary
SQLite file is filled with generated exchanges of 10k callers (benchmarks/scale.py's
text and bulk load), one caller gets 12 exchanges, a fact and a summary, and then:
- forget: ``store.forget(caller)`` until it answers (the rows are gone from every
  query; what the caller and the model wait for);
- erase: the work queued after it (FTS5 'merge' in steps of
  ``sqlite_erase.ERASE_STEP_PAGES`` pages, each its own transaction, then a TRUNCATE
  checkpoint; ``sqlite_erase.erase_step``) until done, measured as the time until
  ``store.close()`` returns; how many steps, and the longest (the longest time the
  write lock was held by one);
- a save by another call of the same process, queued behind the erase: how long it
  waited;
- another worker process (its own store on the file) whose 5 calls end 0.5 s after
  the forget began: each call's 5 last exchanges handed to its ``ExchangeWriter`` and
  flushed with ``FLUSH_TIMEOUT`` (3 s), as ``CallMemory.aclose`` does; how many of the
  25 were still unsaved when the flushes returned (lost), and the longest flush;
- the file's size before and after, and how many copies of the forgotten caller's
  marker word remain in the database, -wal and -shm files (should be 0).

Usage:
    uv run python benchmarks/forget_erase.py [--sizes 10000,100000] [--out results.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import platform
import random
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# scale.py puts the template's files on the path and imports them
from scale import Text, load_sqlite, memory, rows

# The erasure's steps have a module of their own; the code that first stepped it kept
# them in sqlite_queries, and main at b958530 has none (one 'optimize').
erasing = getattr(memory, "sqlite_erase", memory.sqlite_queries)
ExchangeWriter = memory.writer.ExchangeWriter

MARKER = "quokkazebramarker"
CALLER = "forget-me@example.com"


def copies(db: Path) -> int:
    # The word's first 11 letters: the search index holds its stem ("...mark", behind
    # the caller's prefix), not the word as said.
    files = [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]
    return sum(f.read_bytes().count(MARKER[:11].encode()) for f in files if f.exists())


def other_worker(db: str, go, out) -> None:
    """Another worker process: 5 calls that end 0.5 s after ``go`` is set."""

    async def main() -> None:
        store = memory.open_store(f"sqlite:///{db}")
        await store.stats()  # the file open before the forget
        writers = [ExchangeWriter(store, lambda exc: None) for _ in range(5)]
        out.put("ready")
        await asyncio.get_running_loop().run_in_executor(None, go.wait)
        await asyncio.sleep(0.5)
        for call, writer in enumerate(writers):
            for n in range(5):
                writer.put(
                    memory.Exchange(
                        key=f"other-{call}-{n}",
                        caller_id=f"other-{call}@example.com",
                        call_id=f"other-call-{call}",
                        user_text=f"the last words of call {call}, number {n}",
                        assistant_text="noted",
                        created_at=time.time(),
                    )
                )
        started = time.perf_counter()
        unsaved = await asyncio.gather(*(w.flush(memory.FLUSH_TIMEOUT) for w in writers))
        out.put((sum(unsaved), time.perf_counter() - started))
        await store.close()

    asyncio.run(main())


async def one_size(size: int, seed: int, folder: Path) -> dict[str, float | int]:
    db = folder / f"erase-{size}.db"
    rng = random.Random(seed)
    text = Text(rng)
    store = memory.open_store(f"sqlite:///{db}")
    for start in range(0, size, 50_000):
        load_sqlite(db, rows(text, rng, start, min(size, start + 50_000)))
    for n in range(12):
        await store.save(
            memory.Exchange(
                key=memory.exchange_key(CALLER, f"f-{n}"),
                caller_id=CALLER,
                call_id=f"call-{n // 4}",
                user_text=f"{text.sentence(6, 20)} {MARKER}",
                assistant_text=text.sentence(4, 12),
                created_at=time.time(),
            )
        )
    await store.remember(CALLER, memory.Fact.of("code word", MARKER))
    await store.save_summary(CALLER, "call-0", f"talked about {MARKER}")
    other = sqlite3.connect(db)  # another worker process keeps the file open
    other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    size_before = db.stat().st_size
    context = multiprocessing.get_context("spawn")
    go, out = context.Event(), context.Queue()
    worker = context.Process(target=other_worker, args=(str(db), go, out))
    worker.start()
    assert out.get() == "ready"
    steps: list[float] = []
    step = getattr(erasing, "erase_step", None)  # None: the code before it

    def timed_step(conn: sqlite3.Connection, restart: bool) -> bool:
        t = time.perf_counter()
        assert step is not None
        try:
            return bool(step(conn, restart))
        finally:
            steps.append(time.perf_counter() - t)

    if step is not None:
        erasing.erase_step = timed_step

    started = time.perf_counter()
    go.set()
    await store.forget(CALLER)
    forgot = time.perf_counter() - started
    queued = memory.Exchange(
        key="queued", caller_id="someone-else", call_id="c", user_text="hello", created_at=1.0
    )
    save_started = time.perf_counter()
    await store.save(queued)
    save_waited = time.perf_counter() - save_started
    await store.close()
    erased = time.perf_counter() - started
    if step is not None:
        erasing.erase_step = step
    lost, flush_took = await asyncio.get_running_loop().run_in_executor(None, out.get)
    worker.join()
    left = copies(db)
    other.close()
    return {
        "exchanges": size,
        "forget_ms": round(forgot * 1000, 1),
        "erase_done_ms": round(erased * 1000, 1),
        "save_behind_erase_ms": round(save_waited * 1000, 1),
        "merge_steps": len(steps),
        "longest_step_ms": round(max(steps, default=0) * 1000, 1),
        "other_process_lost": lost,
        "other_process_flush_ms": round(flush_took * 1000, 1),
        "file_mb_before": round(size_before / 1e6, 1),
        "file_mb_after": round(db.stat().st_size / 1e6, 1),
        "copies_left": left,
    }


async def run(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        results = [
            await one_size(int(size), args.seed, Path(folder)) for size in args.sizes.split(",")
        ]
    return {"sqlite": sqlite3.sqlite_version, "machine": platform.platform(), "sizes": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = asyncio.run(run(args))
    for row in result["sizes"]:
        print(json.dumps(row))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
