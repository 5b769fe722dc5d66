"""Spool benchmark (memory/spool.py): what the spool costs a save, and what it saves
when many calls end at once with a backlog.

Imports the template's own memory/ folder (Python files are copied unrendered into
generated projects, so these are the files a project runs). Each part runs with the
spool on and off (``MEMORY_SPOOL=off``: saves go to the store directly, as before
the spool), on a temporary SQLite file and a schema of its own on the PostgreSQL
server --postgres names (dropped at the end); the spool files go in a temporary data
folder.

- saves: --saves exchanges saved with ``store.save`` from --concurrency calls at
  once, each saving one after the other as ``ExchangeWriter`` does; saves per
  second, and p50 / p95 of one save (ms).
- close: --calls calls of one worker, each with --pending exchanges captured while
  the store refused every write (SQLite: another process holds the file's write
  lock; PostgreSQL: the schema is not there yet), then the store is back and every
  call ends at once (``CallMemory.aclose``, bound ``FLUSH_TIMEOUT``). Reported:
  seconds until every close returned, exchanges in the store then (saved within
  the bound), still spooled, lost (what the closes reported unsaved), and the
  seconds until the store held all of them. --runs runs.

Usage:
    uv run python benchmarks/spool.py [--out benchmarks/results/spool.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
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
sys.path[:0] = [str(TEMPLATE)]

import memory  # noqa: E402
import psycopg  # noqa: E402
from memory import postgres_pool, postgres_store  # noqa: E402


def exchange(caller: str, n: int) -> memory.Exchange:
    return memory.Exchange(
        memory.exchange_key(caller, f"u{n}"),
        caller,
        "call-bench",
        f"turn {n}: I would like to move my booking to the Tuesday after next",
        "Done: your booking is now on Tuesday the 14th.",
        False,
        (f"u{n}", f"r{n}"),
        1000.0 + n,
    )


async def saves(store: memory.MemoryStore, total: int, concurrency: int) -> dict:
    each = total // concurrency
    times: list[float] = []

    async def one_call(c: int) -> None:
        for n in range(each):
            started = time.perf_counter()
            await store.save(exchange(f"bench-{c}", n))
            times.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(one_call(c) for c in range(concurrency)))
    took = time.perf_counter() - started
    times.sort()
    return {
        "saves_per_s": round(each * concurrency / took),
        "p50_ms": round(times[len(times) // 2] * 1000, 2),
        "p95_ms": round(times[int(len(times) * 0.95)] * 1000, 2),
    }


async def close_at_once(url: str, backend: str, calls: int, pending: int) -> dict:
    """One run of the close part on a fresh store ``url`` names (refusing writes
    until it is made ready)."""
    lock = None
    if backend == "sqlite":
        opened = memory.open_store(url)
        await opened.close()
        lock = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        lock.execute("BEGIN EXCLUSIVE")
    store = memory.open_store(url)
    members = [memory.CallMemory(store, f"caller-{c}", f"call-{c}") for c in range(calls)]
    for call in members:
        for n in range(pending):
            call.capture("user", f"u{n}", f"turn {n} about the booking", created_at=1e3 + n)
            call.capture("assistant", f"r{n}", f"reply {n}", created_at=1e3 + n + 0.5)
    # hand everything over (spooled at once; without the spool it waits in memory)
    await asyncio.sleep(1.0)
    if lock is not None:
        lock.execute("ROLLBACK")
        lock.close()
    else:
        postgres_store.upgrade(url)
    started = time.perf_counter()
    unsaved = await asyncio.gather(*(c.aclose("shutdown") for c in members))
    closed = time.perf_counter() - started
    inner = getattr(store, "store", store)
    in_store = total = 0
    for c in range(calls):
        in_store += len(await inner.exchanges(f"caller-{c}", call_id=f"call-{c}"))
        total += len(await store.exchanges(f"caller-{c}", call_id=f"call-{c}"))
    flush = getattr(store, "flush", None)
    all_in = None
    if flush is not None:
        while time.perf_counter() - started < 60 and await flush(5.0):
            pass
        all_in = round(time.perf_counter() - started, 2)
    await store.close()
    return {
        "close_s": round(closed, 2),
        "in_store_at_close": in_store,
        "spooled_at_close": total - in_store,
        "lost": sum(unsaved),
        "all_in_store_s": all_in if in_store < calls * pending else round(closed, 2),
    }


def postgres_url(server: str) -> str:
    schema = f"bench_spool_{uuid.uuid4().hex[:10]}"
    return server + ("&" if "?" in server else "?") + f"schema={schema}"


def drop(server: str, url: str) -> None:
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {postgres_store.Target(url).schema} CASCADE")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--saves", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--pending", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--spools", default="off,on", help="MEMORY_SPOOL values to run")
    parser.add_argument("--out")
    args = parser.parse_args()
    postgres_pool.RECHECK_AFTER = 0.2  # a schema made meanwhile is seen at once
    results: dict[str, Any] = {
        "machine": platform.platform(),
        "load": os.getloadavg(),
        "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "args": vars(args),
        "rows": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MEMORY_DATA_DIR"] = str(Path(tmp) / "data")
        for backend in args.backends.split(","):
            for spool in args.spools.split(","):
                os.environ["MEMORY_SPOOL"] = spool
                schemas: list[str] = []

                def fresh(backend: str = backend, schemas: list[str] = schemas) -> str:
                    if backend == "sqlite":
                        return f"sqlite:///{Path(tmp) / uuid.uuid4().hex}.db"
                    url = postgres_url(args.postgres)
                    schemas.append(url)
                    return url

                url = fresh()
                if backend == "postgres":
                    postgres_store.upgrade(url)
                store = memory.open_store(url)
                row: dict[str, Any] = {"backend": backend, "spool": spool}
                row["saves"] = await saves(store, args.saves, args.concurrency)
                await store.close()
                runs = [
                    await close_at_once(fresh(), backend, args.calls, args.pending)
                    for _ in range(args.runs)
                ]
                row["close_runs"] = runs
                row["close_median_s"] = statistics.median(r["close_s"] for r in runs)
                row["lost_total"] = sum(r["lost"] for r in runs)
                results["rows"].append(row)
                print(json.dumps(row), flush=True)
                for url in schemas:
                    drop(args.postgres, url)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
