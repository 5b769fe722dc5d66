"""Postgres vacuum benchmark: how long `uv run -m memory.postgres_store vacuum` (VACUUM
FULL of the tables that hold a caller's words, memory/postgres_admin.py) takes after a
forget, as the store grows; each table is locked while it is written anew.

Imports the template's own memory/ folder (through scale.py). At each size, a schema
of its own on the server --postgres names is filled with generated exchanges of 10k
callers (scale.py's text and bulk load, word counts included), one caller is
forgotten, and ``postgres_admin.vacuum`` is timed (--runs times). The schema is
dropped at the end.

Usage:
    uv run python benchmarks/postgres_vacuum.py [--sizes 10000,100000] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import platform
import random
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# scale.py puts the template's files on the path and imports them
from scale import Text, caller_of, load_postgres, memory, psycopg, rows

postgres_store = memory.postgres_store  # imported by scale
postgres_admin = importlib.import_module("memory.postgres_admin")


async def one_size(server: str, size: int, runs: int, seed: int) -> dict[str, object]:
    schema = f"bench_vacuum_{uuid.uuid4().hex[:8]}"
    url = server + ("&" if "?" in server else "?") + f"schema={schema}"
    postgres_store.upgrade(url)
    try:
        rng = random.Random(seed)
        text = Text(rng)
        for start in range(0, size, 50_000):
            load_postgres(url, rows(text, rng, start, min(size, start + 50_000)))
        store = memory.open_store(url)
        gone = await store.forget(caller_of(7))
        await store.close()
        with psycopg.connect(server, autocommit=True) as conn:
            row = conn.execute(
                "SELECT sum(pg_total_relation_size(c.oid)) / 1e6 FROM pg_class c"
                " WHERE relnamespace = to_regnamespace(%s) AND relkind = 'r'",
                [schema],
            ).fetchone()
        assert row is not None
        (mb,) = row
        seconds = []
        for _ in range(runs):
            started = time.perf_counter()
            kept = postgres_admin.vacuum(url)
            seconds.append(round(time.perf_counter() - started, 2))
            assert kept == {}, kept
        return {
            "exchanges": size,
            "forgotten_rows": gone,
            "mb": round(float(mb), 1),
            "vacuum_s": seconds,
        }
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results = [
        asyncio.run(one_size(args.postgres, int(n), args.runs, seed=n))
        for n in (int(s) for s in args.sizes.split(","))
    ]
    print(json.dumps({"machine": platform.platform(), "results": results}, indent=2))


if __name__ == "__main__":
    main()
